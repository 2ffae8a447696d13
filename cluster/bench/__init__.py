"""What `kraftwerk bench` runs: cluster figures, side by side with librdkafka's mock, and at scale."""

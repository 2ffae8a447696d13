"""What the controller and every node load alike: Kafka's record batches and legacy message sets,
partition logs, KRaft metadata records and the image built from them, the control protocol,
configuration files, checkpoints and error codes."""

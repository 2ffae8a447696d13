// Command sarama-produce sends keyed messages with a Sarama 1.22 SyncProducer, in groups
// that SendMessages puts into one request (and, compressed, into one wrapper message per
// partition), and prints, for each message, where the broker says it was written.
//
// The protocol Sarama speaks depends on Config.Version: its default (V0_8_2_0) produces
// magic-0 message sets with Produce v0, V0_10_2_0 magic-1 sets with Produce v2, and
// V0_11_0_0 or later record batches with Produce v3. Users pin that version in their
// config, so the test runs the same producer at several of them.
//
// Output: one JSON object per acknowledged message:
//
//	{"key": "...", "value": "...", "partition": 0, "offset": 0}
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/Shopify/sarama"
)

type delivered struct {
	Key       string `json:"key"`
	Value     string `json:"value"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

func main() {
	brokers := flag.String("brokers", "", "comma-separated bootstrap servers")
	topic := flag.String("topic", "", "topic to produce to")
	version := flag.String("version", "", "Kafka version to speak, e.g. 0.10.2.0 or 2.0.0 (empty: Sarama's default)")
	count := flag.Int("count", 100, "number of messages")
	prefix := flag.String("prefix", "sarama", "prefix of every key and value")
	batch := flag.Int("batch", 10, "messages per SendMessages call")
	timestampBase := flag.Int64("timestamp-base", 0, "message i gets this timestamp + i ms (0: Sarama stamps the time it sends)")
	compression := flag.String("compression", "none", "none, gzip, snappy or lz4")
	flag.Parse()

	config := sarama.NewConfig()
	if *version != "" {
		parsed, err := sarama.ParseKafkaVersion(*version)
		if err != nil {
			log.Fatalf("version: %v", err)
		}
		config.Version = parsed
	}
	config.ClientID = "sarama-produce"
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Return.Successes = true // a SyncProducer requires it
	config.Producer.Partitioner = sarama.NewHashPartitioner
	codecs := map[string]sarama.CompressionCodec{"none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP,
		"snappy": sarama.CompressionSnappy, "lz4": sarama.CompressionLZ4}
	codec, known := codecs[*compression]
	if !known {
		log.Fatalf("unknown compression %q", *compression)
	}
	config.Producer.Compression = codec

	producer, err := sarama.NewSyncProducer(strings.Split(*brokers, ","), config)
	if err != nil {
		log.Fatalf("producer: %v", err)
	}
	out := json.NewEncoder(os.Stdout)
	for first := 0; first < *count; first += *batch {
		var messages []*sarama.ProducerMessage
		for i := first; i < first+*batch && i < *count; i++ {
			message := &sarama.ProducerMessage{Topic: *topic,
				Key:   sarama.StringEncoder(fmt.Sprintf("%s-key-%d", *prefix, i)),
				Value: sarama.StringEncoder(fmt.Sprintf("%s value %d", *prefix, i))}
			if *timestampBase != 0 {
				// Only magic 1 and later carry it: at Sarama's default version it is dropped.
				message.Timestamp = time.Unix(0, (*timestampBase+int64(i))*int64(time.Millisecond))
			}
			messages = append(messages, message)
		}
		if err := producer.SendMessages(messages); err != nil {
			log.Fatalf("send from %d: %v", first, err)
		}
		for _, m := range messages {
			out.Encode(delivered{string(m.Key.(sarama.StringEncoder)), string(m.Value.(sarama.StringEncoder)),
				m.Partition, m.Offset})
		}
	}
	if err := producer.Close(); err != nil {
		log.Fatalf("close: %v", err)
	}
}

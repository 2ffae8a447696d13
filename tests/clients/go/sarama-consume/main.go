// Command sarama-consume reads every partition of a topic from its oldest offset with
// Sarama 1.22's plain Consumer (no group), as many services do. At Sarama's default
// version (0.8.2) that is ListOffsets v0 and Fetch v0 (magic-0 message sets), at 0.10.2
// Fetch v3 (magic 1), at 2.0 Fetch v4 (record batches). With -isolation read_committed (0.11 and
// later) it reads only committed transactions, dropping the aborted ones each Fetch answer lists.
//
// Output: one JSON object per message, in the order each partition returned them:
//
//	{"partition": 0, "offset": 0, "key": "...", "value": "...", "timestamp": 1700000000000}
//
// The timestamp is in milliseconds, -1 for a message without one (magic 0).
package main

import (
	"encoding/json"
	"flag"
	"log"
	"os"
	"strings"
	"time"

	"github.com/Shopify/sarama"
)

type consumed struct {
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	Value     string `json:"value"`
	Timestamp int64  `json:"timestamp"`
}

func millis(t time.Time) int64 {
	if t.IsZero() {
		return -1
	}
	return t.UnixNano() / int64(time.Millisecond)
}

func main() {
	brokers := flag.String("brokers", "", "comma-separated bootstrap servers")
	topic := flag.String("topic", "", "topic to read")
	version := flag.String("version", "", "Kafka version to speak, e.g. 0.10.2.0 or 2.0.0 (empty: Sarama's default)")
	limit := flag.Int("messages", 1, "stop after this many messages")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	isolation := flag.String("isolation", "read_uncommitted", "read_uncommitted or read_committed")
	flag.Parse()

	config := sarama.NewConfig()
	if *version != "" {
		parsed, err := sarama.ParseKafkaVersion(*version)
		if err != nil {
			log.Fatalf("version: %v", err)
		}
		config.Version = parsed
	}
	switch *isolation {
	case "read_uncommitted":
	case "read_committed":
		config.Consumer.IsolationLevel = sarama.ReadCommitted
	default:
		log.Fatalf("isolation: %q is neither read_uncommitted nor read_committed", *isolation)
	}
	config.ClientID = "sarama-consume"
	consumer, err := sarama.NewConsumer(strings.Split(*brokers, ","), config)
	if err != nil {
		log.Fatalf("consumer: %v", err)
	}
	partitions, err := consumer.Partitions(*topic)
	if err != nil {
		log.Fatalf("partitions: %v", err)
	}
	// Every partition feeds one channel, so a single loop prints and counts.
	messages := make(chan *sarama.ConsumerMessage)
	done := make(chan struct{})
	var claims []sarama.PartitionConsumer
	for _, partition := range partitions {
		claim, err := consumer.ConsumePartition(*topic, partition, sarama.OffsetOldest)
		if err != nil {
			log.Fatalf("consume partition %d: %v", partition, err)
		}
		claims = append(claims, claim)
		go func() {
			for message := range claim.Messages() {
				select {
				case messages <- message:
				case <-done:
					return
				}
			}
		}()
	}
	out := json.NewEncoder(os.Stdout)
	deadline := time.After(*timeout)
	for taken := 0; taken < *limit; taken++ {
		select {
		case m := <-messages:
			out.Encode(consumed{m.Partition, m.Offset, string(m.Key), string(m.Value), millis(m.Timestamp)})
		case <-deadline:
			log.Fatalf("timed out after %d of %d messages", taken, *limit)
		}
	}
	close(done)
	for _, claim := range claims {
		if err := claim.Close(); err != nil {
			log.Fatalf("close partition: %v", err)
		}
	}
	if err := consumer.Close(); err != nil {
		log.Fatalf("close: %v", err)
	}
}

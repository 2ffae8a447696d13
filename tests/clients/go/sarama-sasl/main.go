// Command sarama-sasl logs in with SASL/PLAIN as Sarama 1.22 does, produces messages to
// partition 0 of a topic with a SyncProducer, and reads them back with a plain Consumer.
//
// At Sarama's default version (0.8.2) it sends SaslHandshake v0 and then the PLAIN token
// raw, size-prefixed, outside any Kafka request, as clients before Kafka 1.0 did; with
// -version 1.0.0 or later it sends SaslHandshake v1 and a SaslAuthenticate request.
//
// Output: one JSON object per message read back:
//
//	{"offset": 0, "value": "..."}
//
// A login the broker refuses makes it exit with status 1 and the error on stderr.
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

type consumed struct {
	Offset int64  `json:"offset"`
	Value  string `json:"value"`
}

func main() {
	brokers := flag.String("brokers", "", "comma-separated bootstrap servers")
	topic := flag.String("topic", "", "topic to produce to and read from")
	version := flag.String("version", "", "Kafka version to speak (empty: Sarama's default, 0.8.2)")
	user := flag.String("user", "", "SASL/PLAIN user")
	password := flag.String("password", "", "SASL/PLAIN password")
	count := flag.Int("count", 10, "number of messages")
	flag.Parse()

	config := sarama.NewConfig()
	if *version != "" {
		parsed, err := sarama.ParseKafkaVersion(*version)
		if err != nil {
			log.Fatalf("version: %v", err)
		}
		config.Version = parsed
	}
	config.ClientID = "sarama-sasl"
	config.Net.SASL.Enable = true
	config.Net.SASL.Mechanism = sarama.SASLTypePlaintext
	config.Net.SASL.User = *user
	config.Net.SASL.Password = *password
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Return.Successes = true
	config.Producer.Partitioner = sarama.NewManualPartitioner
	config.Metadata.Retry.Max = 1

	producer, err := sarama.NewSyncProducer(strings.Split(*brokers, ","), config)
	if err != nil {
		log.Fatalf("producer: %v", err)
	}
	for i := 0; i < *count; i++ {
		message := &sarama.ProducerMessage{Topic: *topic, Partition: 0,
			Value: sarama.StringEncoder(fmt.Sprintf("sarama sasl %d", i))}
		if _, _, err := producer.SendMessage(message); err != nil {
			log.Fatalf("send: %v", err)
		}
	}
	producer.Close()

	consumer, err := sarama.NewConsumer(strings.Split(*brokers, ","), config)
	if err != nil {
		log.Fatalf("consumer: %v", err)
	}
	defer consumer.Close()
	claim, err := consumer.ConsumePartition(*topic, 0, sarama.OffsetOldest)
	if err != nil {
		log.Fatalf("consume: %v", err)
	}
	defer claim.Close()
	out := json.NewEncoder(os.Stdout)
	deadline := time.After(60 * time.Second)
	for read := 0; read < *count; read++ {
		select {
		case m := <-claim.Messages():
			out.Encode(consumed{m.Offset, string(m.Value)})
		case err := <-claim.Errors():
			log.Fatalf("read: %v", err)
		case <-deadline:
			log.Fatalf("read %d of %d messages before the deadline", read, *count)
		}
	}
}

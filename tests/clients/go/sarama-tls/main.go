// Command sarama-tls sends keyed messages with a Sarama 1.22 SyncProducer over TLS, then reads
// them back with a partition Consumer over TLS, as a Go service configured for a TLS cluster does:
// the CA it trusts (-ca) and, for mutual TLS, its own certificate and key (-cert, -key).
//
// Output: one JSON object per acknowledged message, then one per message read:
//
//	{"event": "delivered", "key": "...", "value": "...", "partition": 0, "offset": 0}
//	{"event": "consumed", "key": "...", "value": "...", "partition": 0, "offset": 0}
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io/ioutil"
	"log"
	"os"
	"strings"
	"time"

	"github.com/Shopify/sarama"
)

type record struct {
	Event     string `json:"event"`
	Key       string `json:"key"`
	Value     string `json:"value"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

func tlsConfig(caFile, certFile, keyFile string) *tls.Config {
	pem, err := ioutil.ReadFile(caFile)
	if err != nil {
		log.Fatalf("ca: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		log.Fatalf("ca: no certificate in %s", caFile)
	}
	config := &tls.Config{RootCAs: pool}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			log.Fatalf("client certificate: %v", err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return config
}

func main() {
	brokers := flag.String("brokers", "", "comma-separated bootstrap servers")
	topic := flag.String("topic", "", "topic to produce to and read (one partition)")
	count := flag.Int("count", 10, "number of messages")
	caFile := flag.String("ca", "", "PEM file of the CA to trust")
	certFile := flag.String("cert", "", "PEM file of the client certificate (mutual TLS)")
	keyFile := flag.String("key", "", "PEM file of the client certificate's key")
	timeout := flag.Duration("timeout", 60*time.Second, "give up reading after this long")
	flag.Parse()

	config := sarama.NewConfig()
	config.Version = sarama.V2_0_0_0
	config.ClientID = "sarama-tls"
	config.Net.TLS.Enable = true
	config.Net.TLS.Config = tlsConfig(*caFile, *certFile, *keyFile)
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Return.Successes = true
	config.Producer.Partitioner = sarama.NewManualPartitioner
	out := json.NewEncoder(os.Stdout)
	addresses := strings.Split(*brokers, ",")

	producer, err := sarama.NewSyncProducer(addresses, config)
	if err != nil {
		log.Fatalf("producer: %v", err)
	}
	for i := 0; i < *count; i++ {
		message := &sarama.ProducerMessage{Topic: *topic, Partition: 0,
			Key: sarama.StringEncoder(fmt.Sprintf("sarama-key-%d", i)), Value: sarama.StringEncoder(fmt.Sprintf("sarama value %d", i))}
		if _, _, err := producer.SendMessage(message); err != nil {
			log.Fatalf("send %d: %v", i, err)
		}
		out.Encode(record{"delivered", string(message.Key.(sarama.StringEncoder)),
			string(message.Value.(sarama.StringEncoder)), message.Partition, message.Offset})
	}
	if err := producer.Close(); err != nil {
		log.Fatalf("close producer: %v", err)
	}

	consumer, err := sarama.NewConsumer(addresses, config)
	if err != nil {
		log.Fatalf("consumer: %v", err)
	}
	claim, err := consumer.ConsumePartition(*topic, 0, sarama.OffsetOldest)
	if err != nil {
		log.Fatalf("consume: %v", err)
	}
	deadline := time.After(*timeout)
	for read := 0; read < *count; read++ {
		select {
		case m := <-claim.Messages():
			out.Encode(record{"consumed", string(m.Key), string(m.Value), m.Partition, m.Offset})
		case err := <-claim.Errors():
			log.Fatalf("read: %v", err)
		case <-deadline:
			log.Fatalf("read %d of %d messages in %v", read, *count, *timeout)
		}
	}
	claim.Close()
	consumer.Close()
}

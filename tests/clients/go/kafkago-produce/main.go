// Command kafkago-produce writes keyed messages with a kafka-go 0.2.1 Writer, which sends
// magic-1 message sets with Produce v2 to each partition's leader. The Writer does not say
// where a message went, so the test reads the topic back to learn that.
//
// With -compression, each batch of a partition goes as one compressed wrapper message.
//
// Output: {"written": <count>} once WriteMessages returned without error.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	kafka "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/gzip"
	"github.com/segmentio/kafka-go/lz4"
	"github.com/segmentio/kafka-go/snappy"
)

func main() {
	brokers := flag.String("brokers", "", "comma-separated bootstrap servers")
	topic := flag.String("topic", "", "topic to produce to")
	count := flag.Int("count", 100, "number of messages")
	prefix := flag.String("prefix", "kafka-go", "prefix of every key and value")
	compression := flag.String("compression", "none", "none, gzip, snappy or lz4")
	timestampBase := flag.Int64("timestamp-base", 0, "message i gets this timestamp + i ms (0: the time it is written)")
	flag.Parse()

	codecs := map[string]kafka.CompressionCodec{"none": nil, "gzip": gzip.NewCompressionCodec(),
		"snappy": snappy.NewCompressionCodec(), "lz4": lz4.NewCompressionCodec()}
	codec, known := codecs[*compression]
	if !known {
		log.Fatalf("unknown compression %q", *compression)
	}

	writer := kafka.NewWriter(kafka.WriterConfig{
		Brokers:  strings.Split(*brokers, ","),
		Topic:    *topic,
		Balancer: &kafka.Hash{},
		// The Writer waits up to BatchTimeout (1 s by default) for a full batch; the test
		// writes all its messages in one call, so a short flush keeps it quick.
		BatchTimeout:     10 * time.Millisecond,
		CompressionCodec: codec,
	})
	messages := make([]kafka.Message, *count)
	for i := range messages {
		messages[i] = kafka.Message{
			Key:   []byte(fmt.Sprintf("%s-key-%d", *prefix, i)),
			Value: []byte(fmt.Sprintf("%s value %d", *prefix, i)),
		}
		if *timestampBase != 0 {
			messages[i].Time = time.Unix(0, (*timestampBase+int64(i))*int64(time.Millisecond))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := writer.WriteMessages(ctx, messages...); err != nil {
		log.Fatalf("write: %v", err)
	}
	if err := writer.Close(); err != nil {
		log.Fatalf("close: %v", err)
	}
	json.NewEncoder(os.Stdout).Encode(map[string]int{"written": *count})
}

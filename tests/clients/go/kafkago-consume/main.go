// Command kafkago-consume reads messages with a kafka-go 0.2.1 Reader (Fetch v2, magic-1
// message sets), either from one partition from its first offset or, with -group, as a
// consumer group member that commits what it read (OffsetCommit v2) before it leaves.
//
// Output: one JSON object per message, then {"closed": true, "consumed": <n>}:
//
//	{"partition": 0, "offset": 0, "key": "...", "value": "...", "timestamp": 1700000000000}
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"os"
	"strings"
	"time"

	kafka "github.com/segmentio/kafka-go"
	// The codecs register themselves; a Reader without them cannot decode compressed sets.
	_ "github.com/segmentio/kafka-go/gzip"
	_ "github.com/segmentio/kafka-go/lz4"
	_ "github.com/segmentio/kafka-go/snappy"
)

type consumed struct {
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	Value     string `json:"value"`
	Timestamp int64  `json:"timestamp"` // milliseconds
}

type closed struct {
	Closed   bool `json:"closed"`
	Consumed int  `json:"consumed"`
}

func main() {
	brokers := flag.String("brokers", "", "comma-separated bootstrap servers")
	topic := flag.String("topic", "", "topic to read")
	partition := flag.Int("partition", 0, "partition to read (without -group)")
	group := flag.String("group", "", "consumer group id (reads every partition)")
	limit := flag.Int("messages", 1, "stop after this many messages")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	verbose := flag.Bool("verbose", false, "log the Reader's group handling to stderr")
	flag.Parse()

	config := kafka.ReaderConfig{
		Brokers: strings.Split(*brokers, ","),
		Topic:   *topic,
		MaxWait: 100 * time.Millisecond,
	}
	if *group != "" {
		config.GroupID = *group
		// Heartbeats (and so rebalances) come at this pace; Kafka's 3 s would only slow the test.
		config.HeartbeatInterval = 500 * time.Millisecond
		// Reader.Close in 0.2.1 cancels its context before it dials the coordinator to send
		// LeaveGroup, so a closed reader never leaves: the next member's join waits until the
		// coordinator expires it. Kafka's smallest session timeout (6 s) keeps that wait short.
		config.SessionTimeout = 6 * time.Second
	} else {
		config.Partition = *partition
	}
	if *verbose {
		config.Logger = log.New(os.Stderr, "kafka-go: ", log.LstdFlags|log.Lmicroseconds)
	}
	reader := kafka.NewReader(config)

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	out := json.NewEncoder(os.Stdout)
	taken := 0
	for ; taken < *limit; taken++ {
		// With a GroupID, ReadMessage commits each message before returning it
		// (CommitInterval 0 makes commits synchronous).
		message, err := reader.ReadMessage(ctx)
		if err != nil {
			log.Printf("read: %v", err)
			break
		}
		out.Encode(consumed{message.Partition, message.Offset, string(message.Key), string(message.Value),
			message.Time.UnixNano() / int64(time.Millisecond)})
	}
	if err := reader.Close(); err != nil {
		log.Fatalf("close: %v", err)
	}
	out.Encode(closed{true, taken})
	if taken < *limit {
		os.Exit(1)
	}
}

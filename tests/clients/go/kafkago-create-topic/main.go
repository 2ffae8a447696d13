// Command kafkago-create-topic creates a topic with kafka-go 0.2.1's Conn.CreateTopics,
// which sends CreateTopics v0 to the broker it dialled.
//
// Output: {"created": "<topic>"} once the broker accepted it.
package main

import (
	"encoding/json"
	"flag"
	"log"
	"os"
	"strings"

	kafka "github.com/segmentio/kafka-go"
)

func main() {
	broker := flag.String("broker", "", "one broker address")
	topic := flag.String("topic", "", "topic to create")
	partitions := flag.Int("partitions", 1, "number of partitions")
	replicas := flag.Int("replication-factor", 1, "replication factor")
	config := flag.String("config", "", "one topic config as name=value (optional)")
	flag.Parse()

	topicConfig := kafka.TopicConfig{Topic: *topic, NumPartitions: *partitions, ReplicationFactor: *replicas}
	if *config != "" {
		nameValue := strings.SplitN(*config, "=", 2)
		topicConfig.ConfigEntries = []kafka.ConfigEntry{{ConfigName: nameValue[0], ConfigValue: nameValue[1]}}
	}

	conn, err := kafka.Dial("tcp", *broker)
	if err != nil {
		log.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	if err := conn.CreateTopics(topicConfig); err != nil {
		log.Fatalf("create topics: %v", err)
	}
	json.NewEncoder(os.Stdout).Encode(map[string]string{"created": *topic})
}

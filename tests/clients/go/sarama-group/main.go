// Command sarama-group consumes a topic as a member of a Sarama 1.22 ConsumerGroup, marks
// each message it prints, and stops after a given number of messages, or with -messages 0
// when it is sent SIGTERM or SIGINT. Leaving commits the marked offsets (OffsetCommit v1
// with Sarama's default retention), so a second run with the same group resumes right
// after them. -strategy picks the assignment strategy among those Sarama 1.22 offers:
// range (its default) and roundrobin.
//
// Output: one JSON object per consumed message, then one when the group was left:
//
//	{"partition": 0, "offset": 0, "key": "...", "value": "..."}
//	{"closed": true, "consumed": 10}
//
// Errors Sarama reports while it runs (a failed offset commit, a failed fetch) are printed
// as {"error": "..."} lines, so that a test can tell a clean run from one that recovered.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/Shopify/sarama"
)

type consumed struct {
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	Value     string `json:"value"`
}

type failure struct {
	Error string `json:"error"`
}

type closed struct {
	Closed   bool `json:"closed"`
	Consumed int  `json:"consumed"`
}

// handler prints and marks messages until it has taken its quota, then cancels the session.
// Claims run in their own goroutines, so the count and the output share one lock: a
// message is either printed and marked, or neither.
type handler struct {
	mu     sync.Mutex
	limit  int
	taken  int
	out    *lockedEncoder
	finish context.CancelFunc
}

// lockedEncoder keeps lines whole when claims and the error reader print at once.
type lockedEncoder struct {
	mu      sync.Mutex
	encoder *json.Encoder
}

func (e *lockedEncoder) Encode(value interface{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.encoder.Encode(value)
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *handler) ConsumeClaim(session sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for message := range claim.Messages() {
		if !h.take(session, message) {
			return nil
		}
	}
	return nil
}

func (h *handler) take(session sarama.ConsumerGroupSession, message *sarama.ConsumerMessage) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.limit > 0 && h.taken >= h.limit {
		return false
	}
	h.out.Encode(consumed{message.Partition, message.Offset, string(message.Key), string(message.Value)})
	session.MarkMessage(message, "")
	h.taken++
	if h.taken == h.limit {
		h.finish()
	}
	return true
}

// strategies are the assignment strategies of Sarama 1.22, by the name its JoinGroup offers.
var strategies = map[string]sarama.BalanceStrategy{
	sarama.BalanceStrategyRange.Name():      sarama.BalanceStrategyRange,
	sarama.BalanceStrategyRoundRobin.Name(): sarama.BalanceStrategyRoundRobin,
}

func main() {
	brokers := flag.String("brokers", "", "comma-separated bootstrap servers")
	topic := flag.String("topic", "", "topic to consume")
	group := flag.String("group", "", "consumer group id")
	version := flag.String("version", "2.0.0", "Kafka version to speak, e.g. 2.0.0 (ConsumerGroup needs 0.10.2.0 or later)")
	limit := flag.Int("messages", 1, "stop after this many messages; 0: when sent SIGTERM or SIGINT")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	strategy := flag.String("strategy", "range", "assignment strategy: range or roundrobin")
	session := flag.Duration("session-timeout", 10*time.Second, "the group session timeout")
	heartbeat := flag.Duration("heartbeat-interval", 3*time.Second, "the interval between heartbeats")
	backoff := flag.Duration("rebalance-backoff", 2*time.Second, "the wait before a refused join is tried again")
	flag.Parse()

	config := sarama.NewConfig()
	parsed, err := sarama.ParseKafkaVersion(*version)
	if err != nil {
		log.Fatalf("version: %v", err)
	}
	config.Version = parsed
	config.ClientID = "sarama-group"
	// Sarama starts a group without committed offsets at the newest offset by default.
	config.Consumer.Offsets.Initial = sarama.OffsetOldest
	config.Consumer.Return.Errors = true
	balance, known := strategies[*strategy]
	if !known {
		log.Fatalf("strategy: %q is not one of Sarama's (range, roundrobin)", *strategy)
	}
	config.Consumer.Group.Rebalance.Strategy = balance
	config.Consumer.Group.Session.Timeout = *session
	config.Consumer.Group.Heartbeat.Interval = *heartbeat
	config.Consumer.Group.Rebalance.Retry.Backoff = *backoff

	consumerGroup, err := sarama.NewConsumerGroup(strings.Split(*brokers, ","), *group, config)
	if err != nil {
		log.Fatalf("group: %v", err)
	}
	out := &lockedEncoder{encoder: json.NewEncoder(os.Stdout)}
	go func() {
		for err := range consumerGroup.Errors() {
			out.Encode(failure{err.Error()})
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	stopped := make(chan os.Signal, 1)
	signal.Notify(stopped, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stopped
		cancel()
	}()
	h := &handler{limit: *limit, out: out, finish: cancel}
	// Consume returns at each rebalance; run it again until the quota is met or time is up.
	for ctx.Err() == nil {
		if err := consumerGroup.Consume(ctx, []string{*topic}, h); err != nil {
			log.Fatalf("consume: %v", err)
		}
	}
	if err := consumerGroup.Close(); err != nil {
		log.Fatalf("close: %v", err)
	}
	out.Encode(closed{true, h.taken})
	if h.taken < h.limit || (*limit == 0 && ctx.Err() == context.DeadlineExceeded) {
		log.Fatalf("timed out after %d of %d messages", h.taken, h.limit)
	}
}

"""A confluent-kafka consumer of a KIP-848 group (group.protocol=consumer), run as a process of its own
so that a test can kill it: `python -m tests.integration.kip848_member BOOTSTRAP GROUP SUBSCRIPTION [INSTANCE]`;
with GROUP_PROTOCOL=classic in its environment, a member of the classic protocol instead.

SUBSCRIPTION is a comma-separated list of topics (one starting "^" is a regex). It prints one JSON
line per event: {"event": "assigned"|"revoked"|"lost", "partitions": [[topic, partition], ...],
"t": time} from the rebalance callbacks, {"event": "record", "topic", "partition", "offset",
"value"} per message, {"event": "error", "error"} per error. What it read of a partition is
committed before the partition is revoked, so the next owner starts where it stopped. A line
"stop" on stdin closes it cleanly (it leaves the group); then it prints {"event": "closed"}.
"""
from __future__ import annotations

import json
import os
import select
import sys
import time

import confluent_kafka


# GROUP_PROTOCOL=classic in the environment: a member of the classic protocol (JoinGroup, SyncGroup,
# Heartbeat) with the eager range assignor, heartbeating often enough to hear of a rebalance at once.
CLASSIC = {"group.protocol": "classic", "partition.assignment.strategy": "range", "session.timeout.ms": 6000,
           "heartbeat.interval.ms": 300}


def emit(**event) -> None:
    print(json.dumps(event), flush=True)


def main(bootstrap: str, group: str, subscription: str, instance_id: str | None = None) -> None:
    config = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
              "auto.offset.reset": "earliest", "enable.auto.commit": False,
              "error_cb": lambda error: emit(event="error", error=str(error))}
    if os.environ.get("GROUP_PROTOCOL") == "classic":
        config.update(CLASSIC)
    if instance_id:
        config["group.instance.id"] = instance_id
    consumer = confluent_kafka.Consumer(config)
    uncommitted: dict[tuple[str, int], int] = {}

    def commit(partitions) -> None:
        offsets = [confluent_kafka.TopicPartition(tp.topic, tp.partition, uncommitted.pop((tp.topic, tp.partition)))
                   for tp in partitions if (tp.topic, tp.partition) in uncommitted]
        if not offsets:
            return
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
        except confluent_kafka.KafkaException as exc:
            emit(event="commit_failed", error=str(exc))
            for tp in offsets:
                uncommitted.setdefault((tp.topic, tp.partition), tp.offset)

    def callback(kind: str):
        def on_change(_consumer, partitions) -> None:
            if kind == "revoked":
                commit(partitions)
            emit(event=kind, partitions=sorted([tp.topic, tp.partition] for tp in partitions), t=time.time())
        return on_change

    consumer.subscribe(subscription.split(","), on_assign=callback("assigned"), on_revoke=callback("revoked"),
                       on_lost=callback("lost"))
    last_commit = time.monotonic()
    while True:
        if select.select([sys.stdin], [], [], 0)[0] and sys.stdin.readline().strip() == "stop":
            break
        message = consumer.poll(0.1)
        if message is not None:
            if message.error():
                emit(event="error", error=str(message.error()))
            else:
                uncommitted[(message.topic(), message.partition())] = message.offset() + 1
                emit(event="record", topic=message.topic(), partition=message.partition(), offset=message.offset(),
                     value=message.value().decode())
        if uncommitted and time.monotonic() - last_commit > 0.5:
            commit([confluent_kafka.TopicPartition(t, p) for t, p in list(uncommitted)])
            last_commit = time.monotonic()
    consumer.close()
    emit(event="closed")


if __name__ == "__main__":
    main(*sys.argv[1:])

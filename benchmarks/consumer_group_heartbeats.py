"""ConsumerGroupHeartbeats a coordinator answers per second: `python -m benchmarks.consumer_group_heartbeats`.

The group coordinator runs in this process on a real `__consumer_offsets` partition log, on a node
that is the partition's only replica (as tests/unit/test_group_coordinator's), with no sockets: what
is measured is the coordinator's own work per heartbeat. --members members join one group
subscribed to --topics topics of --partitions partitions in all (by name, or with --regex by a
regular expression, matched against --other-topics unrelated topics too); they heartbeat until every
member is stable at the group's epoch, which is timed as the rebalance. Then each member sends
--rounds plain heartbeats (its epoch, nothing changed), as a stable group's members do every
heartbeat interval: the heartbeats per second of those rounds is the figure to compare.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

from cluster.formats.config import BrokerConfig
from cluster.formats.errors import ErrorCode
from cluster.formats.image import PartitionInfo, TopicInfo
from cluster.formats.partition_log import PartitionLog
from node.groups.consumer_membership import Heartbeat
from node.groups.coordinator import GroupCoordinator
from tests.unit.test_group_coordinator import NODE_ID, LeaderBroker

GROUP = "bench"


class BrokerWithTopics(LeaderBroker):
    def __init__(self, partition_log: PartitionLog, topics: dict[str, int]):
        super().__init__(partition_log)
        self.config = BrokerConfig({"node.id": str(NODE_ID), "offsets.topic.num.partitions": "1",
                                    "group.consumer.max.size": "100000", "group.consumer.session.timeout.ms": "600000",
                                    "group.consumer.max.session.timeout.ms": "600000"})
        infos = [TopicInfo(name, uuid.uuid4(), {p: PartitionInfo(p, NODE_ID, [NODE_ID], [NODE_ID], 0)
                                                for p in range(count)}) for name, count in topics.items()]
        self.image = SimpleNamespace(topics={t.name: t for t in infos}, topics_by_id={t.topic_id: t for t in infos},
                                     configs={}, changes=0)

    def topic(self, name):
        return self.image.topics.get(name)

    def topic_by_id(self, topic_id):
        return self.image.topics_by_id.get(topic_id)


def topics_of(args) -> tuple[dict[str, int], list[str]]:
    per_topic, extra = divmod(args.partitions, args.topics)
    subscribed = {f"orders-{i}": per_topic + (1 if i < extra else 0) for i in range(args.topics)}
    others = {f"audit-{i}": 1 for i in range(args.other_topics)}
    return {**subscribed, **others}, sorted(subscribed)


async def run(args) -> None:
    all_topics, subscribed = topics_of(args)
    with tempfile.TemporaryDirectory() as tmp:
        partition_log = PartitionLog(Path(tmp) / "__consumer_offsets-0")
        coordinator = GroupCoordinator(BrokerWithTopics(partition_log, all_topics))
        coordinator.load_partition(0, partition_log)
        membership = coordinator.consumer
        names, regex = (None, r"orders-\d+") if args.regex else (subscribed, None)
        epochs: dict[str, int] = {}
        owned: dict[str, dict] = {}
        started = time.perf_counter()
        for index in range(args.members):
            member_id = f"member-{index:05d}"
            result = await membership.heartbeat(Heartbeat(GROUP, member_id, 0, rebalance_timeout_ms=60_000,
                                                          subscribed_topic_names=names, subscribed_topic_regex=regex,
                                                          owned={}))
            assert result.error == ErrorCode.NONE, result
            epochs[member_id], owned[member_id] = result.member_epoch, result.assignment or {}
        joined = time.perf_counter()
        rebalance_heartbeats = 0
        group = coordinator.groups[GROUP]
        while not all(m.member_epoch == group.group_epoch and m.state == "STABLE" for m in group.members.values()):
            for member_id in epochs:
                result = await membership.heartbeat(Heartbeat(GROUP, member_id, epochs[member_id],
                                                              owned=owned[member_id]))
                assert result.error == ErrorCode.NONE, result
                rebalance_heartbeats += 1
                epochs[member_id] = result.member_epoch
                if result.assignment is not None:
                    owned[member_id] = result.assignment
        settled = time.perf_counter()
        heartbeats = 0
        for _ in range(args.rounds):
            for member_id in epochs:
                result = await membership.heartbeat(Heartbeat(GROUP, member_id, epochs[member_id]))
                assert result.error == ErrorCode.NONE and result.member_epoch == epochs[member_id], result
                heartbeats += 1
        stable = time.perf_counter()
        group.cancel_timers()
        assigned = sum(len(ps) for m in group.members.values() for ps in m.assigned.values())
    print(f"{args.members} members, {sum(all_topics[t] for t in subscribed)} partitions in {len(subscribed)} topics "
          f"subscribed {'by regex' if args.regex else 'by name'}, {args.other_topics} other topics; "
          f"{assigned} partitions assigned at epoch {group.group_epoch}")
    print(f"joins: {args.members / (joined - started):,.0f} heartbeats/s")
    print(f"rebalance: {rebalance_heartbeats} heartbeats in {settled - joined:.2f} s "
          f"({rebalance_heartbeats / (settled - joined):,.0f}/s)")
    print(f"stable: {heartbeats / (stable - settled):,.0f} heartbeats/s "
          f"({(stable - settled) / heartbeats * 1e6:,.0f} us each)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--other-topics", type=int, default=0)
    parser.add_argument("--regex", action="store_true", help="subscribe with a regular expression, not by name")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()

"""The controller's control-plane operations."""
from __future__ import annotations

import asyncio
import logging
import time

from cluster.formats.control import BadControlRequest, ControlConnection, ControlError, NotController
from cluster.runtime.process_table import process_table_id
from cluster.formats.errors import ErrorCode
from cluster.formats.topic_ids import topic_id_from_kafka_string, topic_id_to_kafka_string
from cluster.runtime.time_slices import TimeSlice, gently
from controller import acls, topics
from cluster.formats.config import BrokerConfig
from controller.arguments import check_arguments, expect, expect_list
from controller.activation import Activation
from controller.faults import ControllerFaults
from controller.brokers import (
    PREFERRED, UNCLEAN, Session, elect_leader, iter_changes_for_fenced_broker, iter_imbalanced_leader_changes,
    iter_leaderless_partition_changes, move_leadership, register_broker_record,
)
from cluster.formats.snapshots import SnapshotId
from controller.metadata_writer import MetadataWriter
from controller.process_watch import ProcessWatch
from controller.quorum_status import Voter, describe_quorum
from controller import client_quotas, reassignment, scram_credentials
from controller.topics import MAX_RECORDS_PER_USER_OP, refuse_too_large

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK = 1000
FENCE_CHANGES_LOGGED = 100
# How long a topic or partition creation waits for every live node to open the new logs.
NEW_PARTITIONS_APPLIED_WAIT_S = 10.0
# Operations any controller answers, active or not.
ANSWERED_BY_ANY_CONTROLLER = ("quorum_role", "isolate", "heal", "delay", "describe_faults")


class DuplicateBrokerRegistration(Exception):
    """A node id is taken by another live process."""


# The arguments each operation needs, checked before it runs (nested ones are checked where they are read).
ARGUMENTS = {
    "register": {"node_id": int, "incarnation_id": str, "host": str, "port": int, "pid": (int, type(None))},
    "heartbeat": {"node_id": int, "broker_epoch": int, "applied_offset": int},
    "fetch_metadata": {"offset": int, "max_wait_ms": (int, float, type(None))},
    "fetch_snapshot": {"end_offset": int, "epoch": int, "position": int, "max_bytes": (int, type(None))},
    "create_topics": {"topics": list},
    "delete_topics": {"topics": list},
    "create_partitions": {"topics": list},
    "alter_configs": {"resources": list},
    "replace_configs": {"resources": list},
    "allocate_producer_ids": {"node_id": int},
    "alter_partition": {"node_id": int, "topic_id": str, "partition": int, "leader_epoch": int,
                        "partition_epoch": int, "isr": list},
    "controlled_shutdown": {"node_id": int, "broker_epoch": int},
    "process_died": {"node_id": int, "incarnation_id": str},
    "elect_leaders": {"election_type": int, "partitions": (list, type(None))},
    "wait_ready": {"node_ids": list, "timeout_ms": (int, float, type(None))},
    "wait_in_sync": {"topic": str, "timeout_ms": (int, float, type(None))},
    "alter_reassignments": {"topics": list},
    "list_reassignments": {"topics": (list, type(None))},
    "wait_reassigned": {"partitions": (list, type(None)), "timeout_ms": (int, float, type(None))},
    "unregister_broker": {"node_id": int},
    "move_leader": {"topic": str, "partition": int, "target": (int, type(None))},
    "create_acls": {"creations": list}, "delete_acls": {"filters": list}, "describe_acls": {"filter": dict},
    "alter_scram_credentials": {"deletions": list, "upsertions": list},
    "alter_client_quotas": {"entries": list},
    "delay": {"delay_ms": int},
}


async def changes_of(changes) -> list[tuple[str, dict]]:
    """The changes a per-partition generator yields, computed a slice at a time."""
    return [change async for change in gently(changes) if change]


def _checked(op: str, handler, gate):
    spec = ARGUMENTS.get(op, {})

    async def checked(args: dict, conn) -> dict:
        check_arguments(args, spec)
        await gate(op)
        return await handler(args, conn)
    return checked


class Controller:
    def __init__(self, writer: MetadataWriter, defaults: dict, heartbeat_timeout_ms: int,
                 config: BrokerConfig | None = None, bootstrap_scram: list[str] = ()):
        """`bootstrap_scram`: the --add-scram credentials a new cluster's first records hold."""
        self.writer = writer
        self.image = writer.image
        self.defaults = defaults
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.config = config or BrokerConfig()
        writer.configure_snapshots(self.config)
        self.sessions: dict[int, Session] = {}  # the active controller's, from when it took over
        self.activation = Activation(writer, self._start_sessions, bootstrap_scram)
        self.faults = writer.quorum.faults = ControllerFaults()
        self.process_watch = ProcessWatch(self._fence_dead_incarnation)
        self.voter: Voter | None = None  # who this controller is in the quorum, once it serves
        self._process_table = process_table_id()

    def handlers(self) -> dict:
        """Every operation, checked; all but ANSWERED_BY_ANY_CONTROLLER only on the active controller."""
        return {op: _checked(op, handler, self._gate) for op, handler in self._operations().items()}

    async def _gate(self, op: str) -> None:
        await self.faults.before_request(op)
        if op not in ANSWERED_BY_ANY_CONTROLLER:
            await self.activation.until_active()

    @property
    def active(self) -> bool:
        return self.activation.active

    def take_over(self) -> None:
        """Become the active controller (controller/activation.py)."""
        self.activation.take_over()

    def _start_sessions(self) -> None:
        """Brokers the log says are unfenced get a session when this controller takes over, as Kafka's
        controller does. Differs from Kafka: the first timeout is twice as long, since a node learns
        of a new leader only once it gives up on the old one, which takes up to a session when the
        old one went silent rather than away (paused, cut off)."""
        grace_s = self.heartbeat_timeout_ms / 1000
        self.sessions = {
            b.node_id: Session(b.node_id, b.broker_epoch, b.broker_epoch, last_heartbeat=time.monotonic() + grace_s,
                               heard_from=False)
            for b in self.image.brokers.values() if not b.fenced}

    def _operations(self) -> dict:
        return {
            "register": self.register,
            "heartbeat": self.heartbeat,
            "fetch_metadata": lambda args, _: self.writer.fetch(args["offset"], args.get("max_wait_ms")),
            "fetch_snapshot": lambda args, _: self.writer.fetch_snapshot(
                SnapshotId(args["end_offset"], args["epoch"]), args["position"], args.get("max_bytes")),
            "create_topics": self.create_topics,
            "delete_topics": self.delete_topics,
            "create_partitions": self.create_partitions,
            "alter_configs": self.alter_configs,
            "replace_configs": self.replace_configs,
            "allocate_producer_ids": self.allocate_producer_ids,
            "alter_partition": self.alter_partition,
            "controlled_shutdown": self.controlled_shutdown,
            "process_died": self.process_died,
            "elect_leaders": self.elect_leaders,
            "status": self.status,
            "wait_ready": self.wait_ready,
            "wait_in_sync": self.wait_in_sync,
            "alter_reassignments": self.alter_reassignments,
            "list_reassignments": self.list_reassignments,
            "wait_reassigned": self.wait_reassigned,
            "unregister_broker": self.unregister_broker,
            "move_leader": self.move_leader,
            "create_acls": lambda a, _: self._decide_and_apply(lambda: acls.create_acls(self.image, a["creations"])),
            "delete_acls": lambda a, _: self._decide_and_apply(lambda: acls.delete_acls(self.image, a["filters"])),
            "describe_acls": self._describe_acls,
            "describe_quorum": self._describe_quorum,
            "quorum_role": self.activation.quorum_role,
            **self.faults.operations(),
            "alter_scram_credentials": lambda args, conn: self._decide_and_apply(lambda: (
                scram_credentials.alter_scram_credentials(self.image, args["deletions"], args["upsertions"]))),
            "alter_client_quotas": lambda args, conn: self._decide_and_apply(lambda: client_quotas.alter_client_quotas(
                self.image, args["entries"]), bool(args.get("validate_only"))),
        }

    async def _describe_acls(self, args: dict, conn) -> dict:
        return acls.describe_acls(self.image, args["filter"])

    async def _describe_quorum(self, args: dict, conn) -> dict:
        if self.voter is None:
            raise ControlError("this controller is not serving yet")
        return describe_quorum(self, self.voter)

    def unfenced_brokers(self) -> list[int]:
        return sorted(b.node_id for b in self.image.brokers.values() if not b.fenced)

    # --- brokers ---

    async def register(self, args: dict, conn: ControlConnection) -> dict:
        _topic_id(args["incarnation_id"])  # a malformed one is refused before anything is written
        expect(args.get("rack"), (str, type(None)), "rack")
        async with self.writer.exclusive:
            await self._fence_previous_incarnation(args["node_id"], args["incarnation_id"])
            broker_epoch = self.writer.end_offset  # Kafka uses the offset of the registration record
            await self.writer.append([register_broker_record(args, broker_epoch)])
            self.sessions[args["node_id"]] = Session(args["node_id"], broker_epoch, self.writer.last_offset,
                                                     last_heartbeat=time.monotonic())
        log.info("node %d registered with broker epoch %d", args["node_id"], broker_epoch)
        if args.get("pid") and self._process_table is not None and args.get("process_table") == self._process_table:
            incarnation_id = str(topic_id_from_kafka_string(args["incarnation_id"]))
            self.process_watch.watch(args["node_id"], incarnation_id, args["pid"])
        return {"broker_epoch": broker_epoch, "cluster_id": self.image.cluster_id}

    async def _fence_previous_incarnation(self, node_id: int, incarnation_id: str) -> None:
        """A new process registering under a node id whose old process is still unfenced.

        While the old one's session is alive it is refused: two live processes must not share a
        node id (Kafka's DuplicateBrokerRegistrationException); it retries. Once that session has
        expired, its process is known to have exited, or it never heartbeat to this controller
        since it started, the old one went without a word: its leaderships and ISR places go
        first (Kafka's unclean-shutdown handling).
        """
        broker = self.image.brokers.get(node_id)
        if broker is None or broker.fenced or topic_id_to_kafka_string(broker.incarnation_id) == incarnation_id:
            return
        session = self.sessions.get(node_id)
        if (session is not None and session.heard_from and session.heartbeat_age_ms() <= self.heartbeat_timeout_ms
                and not self.process_watch.has_exited(node_id)):
            raise DuplicateBrokerRegistration(f"node {node_id} is registered by another live process")
        log.warning("node %d registers as a new process while the old one was unfenced: fencing the old one",
                    node_id)
        await self._fence_locked(session or Session(node_id, broker.broker_epoch, broker.broker_epoch))

    def _current_session(self, args: dict):
        """The session of args' node, if args speak for its current registration (broker epoch).
        Refused otherwise, and logged as a warning: a node cut off for a while sends these until it
        learns it was fenced."""
        session = self.sessions.get(args["node_id"])
        if session is None or session.broker_epoch != args["broker_epoch"]:
            raise BadControlRequest(f"stale broker epoch {args['broker_epoch']} for node {args['node_id']}")
        return session

    async def heartbeat(self, args: dict, conn: ControlConnection) -> dict:
        session = self._current_session(args)
        session.last_heartbeat = time.monotonic()
        session.heard_from = True
        session.applied_offset = args["applied_offset"]
        if session.applied_offset >= self.writer.last_offset:
            session.caught_up_ms = int(time.time() * 1000)
        if self._may_unfence(session):
            async with self.writer.exclusive:
                if self._may_unfence(session):
                    records = [("UnfenceBrokerRecord", {"id": session.node_id, "epoch": session.broker_epoch})]
                    changes = await changes_of(iter_leaderless_partition_changes(self.image, session.node_id))
                    await self.writer.append(records + changes)
                    log.info("node %d unfenced", session.node_id)
        else:
            await self.writer.notify()
        return {"fenced": self.image.brokers[session.node_id].fenced}

    def _may_unfence(self, session: Session) -> bool:
        broker = self.image.brokers.get(session.node_id)
        return (broker is not None and broker.fenced and not session.shutting_down
                and self.sessions.get(session.node_id) is session
                and session.applied_offset >= session.registered_at_offset)

    async def fence_silent_brokers(self) -> None:
        """Fence brokers whose heartbeats stopped, as Kafka's controller does after its session timeout."""
        interval = self.heartbeat_timeout_ms / 4000
        while True:
            slept_since = time.monotonic()
            await asyncio.sleep(interval)
            if time.monotonic() - slept_since > interval + self.heartbeat_timeout_ms / 2000:
                # This controller did not run for a while (paused, stalled): the heartbeats it did not
                # read are in its sockets, not missing. Each session starts its timeout afresh.
                log.info("the controller did not run for %.1f s: heartbeat timeouts start again",
                         time.monotonic() - slept_since - interval)
                for session in self.sessions.values():
                    session.last_heartbeat = time.monotonic()
                continue
            if not self.active:
                continue
            for session in list(self.sessions.values()):
                broker = self.image.brokers.get(session.node_id)
                if broker and not broker.fenced and session.heartbeat_age_ms() > self.heartbeat_timeout_ms:
                    log.warning("node %d missed heartbeats for %d ms: fencing it", session.node_id,
                                session.heartbeat_age_ms())
                    try:
                        await self.fence(session)
                    except NotController:
                        break  # the next active controller times the sessions afresh

    async def fence(self, session: Session) -> None:
        """Fence a broker and, in the same batch, move its leaderships and ISR places."""
        async with self.writer.exclusive:
            broker = self.image.brokers.get(session.node_id)
            if broker is not None and not broker.fenced and broker.broker_epoch == session.broker_epoch:
                await self._fence_locked(session)

    async def _fence_locked(self, session: Session) -> None:
        records = [("FenceBrokerRecord", {"id": session.node_id, "epoch": session.broker_epoch})]
        changes = await changes_of(iter_changes_for_fenced_broker(self.image, session.node_id))
        # Each change is worth a line while there are few; a node with thousands gets a summary.
        detailed = changes if len(changes) <= FENCE_CHANGES_LOGGED else []
        for _, change in detailed:
            log.info("fencing node %d: partition %s-%d leader %s isr %s", session.node_id,
                     self.image.topics_by_id[change["topic_id"]].name, change["partition_id"],
                     change.get("leader", "unchanged"), change.get("isr", "unchanged"))
        if not detailed and changes:
            log.info("fencing node %d: %d partitions change leader or ISR", session.node_id, len(changes))
        await self.writer.append(records + changes)

    async def unregister_broker(self, args: dict, conn: ControlConnection) -> dict:
        """UnregisterBroker (kafka-cluster.sh unregister): the node leaves the cluster's metadata.

        As Kafka's controller does, its ISR places and leaderships go in the same batch as the
        UnregisterBrokerRecord; a node id that is not registered is BROKER_ID_NOT_REGISTERED."""
        node_id = args["node_id"]
        async with self.writer.exclusive:
            broker = self.image.brokers.get(node_id)
            if broker is None:
                return {"error_code": int(ErrorCode.BROKER_ID_NOT_REGISTERED),
                        "error_message": f"Broker ID {node_id} is not currently registered"}
            changes = await changes_of(iter_changes_for_fenced_broker(self.image, node_id))
            record = ("UnregisterBrokerRecord", {"broker_id": node_id, "broker_epoch": broker.broker_epoch})
            await self.writer.append(changes + [record])
            self.sessions.pop(node_id, None)
            self.process_watch.forget(node_id)
        log.info("node %d unregistered", node_id)
        return {"error_code": 0, "error_message": None, "metadata_offset": self.writer.last_offset}

    async def controlled_shutdown(self, args: dict, conn: ControlConnection) -> dict:
        """A node about to stop: fence it now so its leaderships move before it goes."""
        session = self._current_session(args)
        # Before the fence is written: a heartbeat answered meanwhile must not unfence it again.
        session.shutting_down = True
        await self.fence(session)
        return {"metadata_offset": self.writer.last_offset}

    async def balance_leaders(self) -> None:
        """Every leader.imbalance.check.interval.seconds, preferred replicas that are live and in sync
        lead again (auto.leader.rebalance.enable), as Kafka's controller does."""
        interval = self.config.get_int("leader.imbalance.check.interval.seconds")
        while True:
            await asyncio.sleep(interval)
            if self.active and self.config.get_bool("auto.leader.rebalance.enable"):
                async with self.writer.exclusive:
                    changes = await changes_of(iter_imbalanced_leader_changes(self.image))
                    if changes:
                        log.info("moving %d leaderships back to their preferred replicas", len(changes))
                        try:
                            await self.writer.append(changes)
                        except NotController:
                            pass  # the next active controller checks again

    async def elect_leaders(self, args: dict, conn) -> dict:
        """ElectLeaders: args["partitions"] is [[topic, partition], ...] or None for every partition,
        in which case (as in Kafka) partitions that needed no election are left out of the results.
        More than MAX_RECORDS_PER_USER_OP partitions asked for, or elections to write, refuse it all."""
        requested = args["partitions"]
        if args["election_type"] not in (PREFERRED, UNCLEAN):
            raise BadControlRequest(f"election_type {args['election_type']} is neither preferred (0) nor unclean (1)")
        if requested is not None and len(requested) > MAX_RECORDS_PER_USER_OP:
            return self._refused(refuse_too_large())
        async with self.writer.exclusive:
            every = requested is None
            if every:
                requested = ((t.name, i) for t in list(self.image.topics.values()) for i in sorted(t.partitions))
            results, records = [], []
            async for item in gently(requested):
                topic, index = item if every else _topic_partition(item)
                outcome, record = elect_leader(self.image, topic, index, args["election_type"])
                if record is not None:
                    records.append(record)
                if not (every and outcome == ErrorCode.ELECTION_NOT_NEEDED):
                    results.append([topic, index, int(outcome)])
            if len(records) > MAX_RECORDS_PER_USER_OP:
                return self._refused(refuse_too_large())
            offset = await self.writer.append(records) if records else self.writer.last_offset
        return {"results": results, "metadata_offset": offset}

    async def move_leader(self, args: dict, conn) -> dict:
        """Move one partition's leadership to another in-sync replica (how `kraftwerk group
        move-coordinator` moves a group's coordinator); args["target"] None lets the controller pick."""
        async with self.writer.exclusive:
            outcome, record = move_leadership(self.image, args["topic"], args["partition"], args.get("target"))
            if record is None:
                return {"error_code": int(outcome), "metadata_offset": self.writer.last_offset}
            offset = await self.writer.append([record])
        log.info("leadership of %s-%d moved to node %d on request", args["topic"], args["partition"],
                 record[1]["leader"])
        return {"error_code": 0, "leader": record[1]["leader"], "metadata_offset": offset}

    async def process_died(self, args: dict, conn: ControlConnection) -> dict:
        """The launcher saw a node's process exit: fence it now rather than after the session timeout."""
        fenced = await self._fence_dead_incarnation(args["node_id"], args["incarnation_id"])
        return {"fenced": fenced, "metadata_offset": self.writer.last_offset}

    async def _fence_dead_incarnation(self, node_id: int, incarnation_id: str) -> bool:
        """Fence a node whose process exited, seen by our own watch or reported by a launcher.

        Only the incarnation that died is fenced; a node that has registered again since is left
        alone, and one already fenced (a controlled shutdown, or the other report) is not fenced twice.
        """
        broker = self.image.brokers.get(node_id)
        session = self.sessions.get(node_id)
        if (not self.active or broker is None or session is None or broker.fenced
                or str(broker.incarnation_id) != incarnation_id):
            return False
        log.warning("node %d: its process exited, fencing it", node_id)
        try:
            await self.fence(session)
        except NotController:
            return False
        return True

    # --- admin ---

    def _refused(self, outcome: topics.Outcome) -> dict:
        code, message = outcome.refused
        log.info("admin request refused: %s", message)
        return {"error_code": int(code), "error_message": message, "metadata_offset": self.writer.last_offset}

    async def _decide_and_apply(self, decide, validate_only: bool = False) -> dict:
        """Run an admin operation alone against the image and write its records, unless it was refused."""
        async with self.writer.exclusive:
            outcome = await decide()
            if outcome.refused:
                return self._refused(outcome)
            offset = self.writer.last_offset
            if outcome.records and not validate_only:
                offset = await self.writer.append(outcome.records)
        return {"results": outcome.results, "metadata_offset": offset}

    async def create_topics(self, args: dict, conn) -> dict:
        reply = await self._decide_and_apply(lambda: topics.create_topics(
            self.image, self.unfenced_brokers(), args["topics"], self.defaults), bool(args.get("validate_only")))
        await self._until_applied_everywhere(reply.get("metadata_offset"))
        return reply

    async def delete_topics(self, args: dict, conn) -> dict:
        return await self._decide_and_apply(lambda: topics.delete_topics(self.image, args["topics"]))

    async def create_partitions(self, args: dict, conn) -> dict:
        reply = await self._decide_and_apply(lambda: topics.create_partitions(
            self.image, self.unfenced_brokers(), args["topics"]), bool(args.get("validate_only")))
        await self._until_applied_everywhere(reply.get("metadata_offset"))
        return reply

    async def _until_applied_everywhere(self, offset: int | None) -> None:
        """New partitions are answered as created once every live node has applied them (opened
        their logs), or after NEW_PARTITIONS_APPLIED_WAIT_S: a client told "created" goes straight
        to the leaders, and a leader still opening its logs answers NOT_LEADER_OR_FOLLOWER, which
        some clients (Burrow's consumer) treat as fatal when they start."""
        if offset is None:
            return
        def applied_everywhere() -> bool:
            return self._caught_up([b for b in self.unfenced_brokers() if b in self.sessions], offset)
        if not await self.writer.wait_for(applied_everywhere, NEW_PARTITIONS_APPLIED_WAIT_S):
            log.info("answering a creation before every live node applied offset %d", offset)

    async def alter_configs(self, args: dict, conn) -> dict:
        return await self._decide_and_apply(lambda: topics.alter_configs(self.image, args["resources"], self.config),
                                            bool(args.get("validate_only")))

    async def replace_configs(self, args: dict, conn) -> dict:
        return await self._decide_and_apply(lambda: topics.replace_configs(self.image, args["resources"], self.config),
                                            bool(args.get("validate_only")))

    async def alter_reassignments(self, args: dict, conn) -> dict:
        return await self._decide_and_apply(lambda: reassignment.alter_reassignments(
            self.image, self.unfenced_brokers(), args["topics"]))

    async def list_reassignments(self, args: dict, conn) -> dict:
        try:
            return {"topics": await reassignment.list_reassignments(self.image, args["topics"])}
        except topics.RequestError as exc:
            return self._refused(topics.Outcome(refused=(exc.code, exc.message)))

    async def alter_partition(self, args: dict, conn) -> dict:
        """A leader changes its ISR, as Kafka's AlterPartition: only at the current epochs."""
        isr = [expect(b, int, "isr member") for b in args["isr"]]
        async with self.writer.exclusive:
            return await self._alter_partition(args, isr)

    async def _alter_partition(self, args: dict, isr: list[int]) -> dict:
        topic = self.image.topics_by_id.get(_topic_id(args["topic_id"]))
        partition = topic.partitions.get(args["partition"]) if topic else None
        if partition is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif partition.leader != args["node_id"] or partition.leader_epoch != args["leader_epoch"]:
            code = ErrorCode.FENCED_LEADER_EPOCH
        elif partition.partition_epoch != args["partition_epoch"]:
            code = ErrorCode.INVALID_UPDATE_VERSION
        elif partition.leader not in isr or not set(isr) <= set(partition.replicas):
            code = ErrorCode.INVALID_REQUEST
        elif any(self.image.brokers.get(b) is None or self.image.brokers[b].fenced
                 for b in set(isr) - set(partition.isr)):
            code = ErrorCode.INELIGIBLE_REPLICA
        else:
            log.info("node %d: ISR of %s-%d %s -> %s", args["node_id"], topic.name, args["partition"],
                     partition.isr, isr)
            # The change that brings the last adding replica into the ISR also completes its reassignment.
            change = reassignment.settle(self.image, partition, {"isr": isr})
            if reassignment.is_reassigning(partition) and "adding_replicas" in change:
                log.info("reassignment of %s-%d complete: replicas %s, leader %s", topic.name, args["partition"],
                         change.get("replicas", partition.replicas), change.get("leader", partition.leader))
            offset = await self.writer.append([("PartitionChangeRecord", {
                "partition_id": args["partition"], "topic_id": topic.topic_id, **change})])
            return {"error_code": 0, "metadata_offset": offset}
        return {"error_code": int(code), "metadata_offset": self.writer.last_offset}

    async def allocate_producer_ids(self, args: dict, conn) -> dict:
        async with self.writer.exclusive:
            first = self.image.next_producer_id
            await self.writer.append([("ProducerIdsRecord", {"broker_id": args["node_id"],
                                                             "broker_epoch": expect(args.get("broker_epoch", -1), int,
                                                                                    "broker_epoch"),
                                                             "next_producer_id": first + PRODUCER_ID_BLOCK})])
        return {"first_producer_id": first, "count": PRODUCER_ID_BLOCK}

    # --- launcher ---

    async def status(self, args: dict, conn) -> dict:
        brokers = []
        for node_id, broker in sorted(self.image.brokers.items()):
            session = self.sessions.get(node_id)
            endpoint = broker.endpoints[0] if broker.endpoints else None
            brokers.append({
                "node_id": node_id, "host": endpoint.host if endpoint else None,
                "port": endpoint.port if endpoint else None, "fenced": broker.fenced,
                "listeners": {e.name: f"{e.host}:{e.port}" for e in broker.endpoints},
                "incarnation_id": topic_id_to_kafka_string(broker.incarnation_id),
                "broker_epoch": broker.broker_epoch,
                "applied_offset": session.applied_offset if session else -1,
                "last_heartbeat_ms_ago": session.heartbeat_age_ms() if session else None,
            })
        return {
            "cluster_id": self.image.cluster_id,
            "metadata_offset": self.writer.last_offset,
            "brokers": brokers,
            "topics": await self._topics_status(),
        }

    async def _topics_status(self) -> list[dict]:
        time_slice = TimeSlice()
        return [{
            "name": topic.name, "topic_id": topic_id_to_kafka_string(topic.topic_id),
            "partitions": [{"partition": p.partition, "leader": p.leader, "replicas": p.replicas, "isr": p.isr,
                            "leader_epoch": p.leader_epoch, "adding_replicas": p.adding_replicas,
                            "removing_replicas": p.removing_replicas}
                           async for _, p in gently(sorted(topic.partitions.items()), time_slice)],
        } for _, topic in sorted(self.image.topics.items())]

    def _ready(self, node_ids: list[int]) -> bool:
        return self._caught_up(node_ids, self.writer.last_offset)

    def _caught_up(self, node_ids: list[int], offset: int) -> bool:
        caught_up = {s.node_id for s in self.sessions.values()
                     if s.node_id in self.image.brokers and not self.image.brokers[s.node_id].fenced
                     and s.applied_offset >= offset}
        return caught_up >= set(node_ids)

    async def wait_ready(self, args: dict, conn) -> dict:
        """Until nodes args["node_ids"] are registered, unfenced and caught up with the metadata log."""
        node_ids = args["node_ids"]
        if not await self.writer.wait_for(lambda: self._ready(node_ids), (args.get("timeout_ms") or 30000) / 1000):
            raise TimeoutError(f"nodes {node_ids} did not register and catch up in time")
        return await self.status(args, conn)

    def _in_sync(self, topic_name: str) -> bool:
        topic = self.image.topics.get(topic_name)
        return topic is not None and all(
            p.leader >= 0 and sorted(p.isr) == sorted(p.replicas) for p in topic.partitions.values()
        ) and self._ready(self.unfenced_brokers())

    async def wait_in_sync(self, args: dict, conn) -> dict:
        """Until every partition of a topic has a leader and all its replicas in the ISR, and every
        live node has applied the metadata (a new topic's replicas are in its ISR from the start,
        before the nodes have opened their logs)."""
        timeout_s = (args.get("timeout_ms") or 30000) / 1000
        in_sync = await self.writer.wait_for(lambda: self._in_sync(args["topic"]), timeout_s)
        return {"in_sync": in_sync}

    async def wait_reassigned(self, args: dict, conn) -> dict:
        """Until no partition of args["partitions"] ([[topic, partition], ...], None for all) is being moved."""
        if args["partitions"] is not None and len(args["partitions"]) > MAX_RECORDS_PER_USER_OP:
            return self._refused(refuse_too_large())
        keys = None if args["partitions"] is None else [_topic_partition(item) for item in args["partitions"]]
        timeout_s = (args.get("timeout_ms") or 30000) / 1000
        return {"settled": await self.writer.wait_for(lambda: not self._moving(keys), timeout_s)}

    def _moving(self, keys: list[tuple[str, int]] | None) -> bool:
        if keys is None:
            return any(reassignment.is_reassigning(p) for t in self.image.topics.values()
                       for p in t.partitions.values())
        for name, index in keys:
            topic = self.image.topics.get(name)
            partition = topic.partitions.get(index) if topic else None
            if partition is not None and reassignment.is_reassigning(partition):
                return True
        return False


def _topic_partition(item) -> tuple[str, int]:
    if len(expect_list(item, "topic partition")) != 2:
        raise BadControlRequest(f"topic partition: expected [topic, partition], got {item!r}")
    return expect(item[0], str, "topic"), expect(item[1], int, "partition")


def _topic_id(kafka_string: str):
    try:
        return topic_id_from_kafka_string(kafka_string)
    except ValueError:
        raise BadControlRequest(f"topic id {kafka_string!r} is not a Kafka topic id") from None

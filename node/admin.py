"""The node's own control port: fault injection, replica state, coordinator placement, group
rebalances and member removals for the launcher and `kraftwerk`.

It speaks the msgpack control protocol (cluster/formats/control.py) on a second port, apart from
the Kafka listener, so that a node isolated from everyone can still be told to heal.
"""
from __future__ import annotations

import inspect

from cluster.formats.control import ControlServer
from cluster.formats.errors import ErrorCode
from cluster.runtime.stall_probe import StallProbe
from node.groups import placement
from node.groups.persistence import GroupError
from node.transactions.placement import TRANSACTION_STATE_TOPIC
from node.apis import HANDLERS
from node.coordinator_log import CoordinatorError
from node.share_coordinator.state import ShareState, StateBatch
from node.faults import CLIENTS, CONTROLLER, error_code_by_name
from node.fetch_stats import client_fetch_stats


def api_key_by_name(name: str | int) -> int:
    """An API key from its number or its name as Kafka spells it (Produce, OffsetCommit, ...)."""
    if isinstance(name, int) or str(name).isdigit():
        key = int(name)
    else:
        wanted = str(name).replace("_", "").lower()
        key = next((k for k, h in HANDLERS.items() if h.request.name.lower().removesuffix("request") == wanted), None)
    if key not in HANDLERS:
        raise ValueError(f"this node does not serve API {name!r}")
    return key


class AdminServer:
    def __init__(self, broker):
        self.broker = broker
        self.faults = broker.faults
        self.server = ControlServer({
            "faults": self.describe_faults,
            "isolate": self.isolate,
            "heal": self.heal,
            "delay": self.delay,
            "inject_error": self.inject_error,
            "replica_states": self.replica_states,
            "client_fetch_stats": self.client_fetch_stats,
            "stall_probe": self.stall_probe,
            "group_coordinator": self.group_coordinator,
            "transaction_coordinator": self.transaction_coordinator,
            "rebalance_group": self.rebalance_group,
            "group_type": self.group_type,
            "remove_group_member": self.remove_group_member,
            "share_state": self.share_state,
            "share_partitions": self.share_partitions,
        })
        self.probe = StallProbe()

    async def start(self, host: str, port: int = 0) -> int:
        tls = self.broker.control_tls
        return await self.server.start(host, port, tls=tls.server if tls else None)

    async def close(self) -> None:
        await self.probe.stop()
        await self.server.close()

    async def describe_faults(self, args: dict, conn) -> dict:
        return self.faults.describe()

    async def isolate(self, args: dict, conn) -> dict:
        """args["parties"]: "controller", "clients" and/or peer node ids; default the controller and every peer."""
        peers = [n for n in self.broker.image.brokers if n != self.broker.node_id]
        parties = args.get("parties") or [CONTROLLER, *peers]
        for party in parties:
            if party not in (CONTROLLER, CLIENTS) and not isinstance(party, int):
                raise ValueError(f"cannot isolate from {party!r}: expected controller, clients or a node id")
        await self.faults.isolate(parties)
        return self.faults.describe()

    async def heal(self, args: dict, conn) -> dict:
        await self.faults.heal()
        return self.faults.describe()

    async def delay(self, args: dict, conn) -> dict:
        self.faults.delay(args["delay_ms"])
        return self.faults.describe()

    async def inject_error(self, args: dict, conn) -> dict:
        self.faults.inject_error(api_key_by_name(args["api"]), error_code_by_name(args["error"]), args.get("count", 1))
        return self.faults.describe()

    async def stall_probe(self, args: dict, conn) -> dict:
        """args["action"] "start" arms a probe of this node's event loop; "stop" ends it and answers
        the longest stall it saw since it started (for benchmarks)."""
        if args.get("action") == "start":
            self.probe.start()
            return {"running": True}
        if args.get("action") != "stop":
            raise ValueError(f"stall_probe: action must be start or stop, not {args.get('action')!r}")
        longest_s, longest_cpu_s = await self.probe.stop()
        return {"running": False, "longest_stall_ms": longest_s * 1000, "longest_stall_cpu_ms": longest_cpu_s * 1000}

    async def replica_states(self, args: dict, conn) -> dict:
        """Each hosted partition's offsets; a leader adds what it knows of its followers."""
        states = []
        for (topic, index), partition in sorted(self.broker.replicas.partitions.items()):
            partition_log = partition.log
            info = self.broker.partition(topic, index)
            states.append({
                "topic": topic, "partition": index,
                "leader": info.leader if info else -1,
                "leader_epoch": info.leader_epoch if info else -1,
                "isr": info.isr if info else [],
                "log_start_offset": partition_log.log_start_offset,
                "log_end_offset": partition_log.log_end_offset,
                "high_watermark": partition_log.high_watermark,
                "follower_offsets": sorted(partition.follower_offsets.items()),
                "cleaned_up_to": self._cleaned_up_to(topic, index),
            })
        return {"node_id": self.broker.node_id, "partitions": states}

    def _cleaned_up_to(self, topic: str, index: int) -> int | None:
        """Where a compacted log's next cleaning starts (the cleaner's checkpoint); None if not compacted."""
        if "compact" not in self.broker.topic_config(topic, "cleanup.policy"):
            return None
        return self.broker.cleaner.checkpoint.offsets.get((topic, index), 0)

    async def client_fetch_stats(self, args: dict, conn) -> dict:
        """Per partition, the fetch answers with records this node sent to consumers, and their bytes."""
        return {"node_id": self.broker.node_id, "partitions": client_fetch_stats()}

    async def group_coordinator(self, args: dict, conn) -> dict:
        """The group's `__consumer_offsets` partition and its leader (the coordinator), as this node sees them."""
        group_id = _named(args, "group_id", "a group name")
        partition = self.broker.groups.partition_of(group_id)
        info = self.broker.partition(placement.OFFSETS_TOPIC, partition)
        return {"group_id": group_id, "topic": placement.OFFSETS_TOPIC, "partition": partition,
                "coordinator": info.leader if info else -1}

    async def transaction_coordinator(self, args: dict, conn) -> dict:
        """The transactional id's `__transaction_state` partition and its leader (the coordinator; -1
        while the topic does not exist yet), as this node sees them."""
        transactional_id = _named(args, "transactional_id", "a transactional id")
        partition = self.broker.transactions.partition_of(transactional_id)
        info = self.broker.partition(TRANSACTION_STATE_TOPIC, partition)
        return {"transactional_id": transactional_id, "topic": TRANSACTION_STATE_TOPIC, "partition": partition,
                "coordinator": info.leader if info else -1}

    async def rebalance_group(self, args: dict, conn) -> dict:
        """Start a rebalance of the group, on its coordinator (others answer NOT_COORDINATOR): a classic
        group's members rejoin; a consumer group's epoch is bumped and a new target assignment computed."""
        group_id = _named(args, "group_id", "a group name")
        error, group = self._coordinated(group_id)
        if group is not None and group.group_type == "consumer":
            try:
                await _done(self.broker.groups.consumer.force_rebalance(group))
            except GroupError as exc:
                return {"error_code": int(exc.code)}
            return {"error_code": 0, "group_type": "consumer", "state": group.state,
                    "group_epoch": group.group_epoch, "members": sorted(group.members)}
        if group is not None and group.group_type != "classic":
            raise ValueError(f"group {group_id} is a {group.group_type} group: only classic and consumer groups "
                             f"rebalance")
        error, group = self.broker.groups.force_rebalance(group_id)
        if group is None:
            return {"error_code": int(error)}
        return {"error_code": 0, "group_type": "classic", "state": group.state, "generation": group.generation,
                "members": sorted(group.members)}

    async def share_partitions(self, args: dict, conn) -> dict:
        """The share-partitions of args["group_id"] this node leads, with their records in flight."""
        return {"node_id": self.broker.node_id,
                "partitions": self.broker.share_partitions.describe(_named(args, "group_id", "group"))}

    async def group_type(self, args: dict, conn) -> dict:
        """The group's type (classic, consumer, share), asked of its coordinator."""
        error, group = self._coordinated(_named(args, "group_id", "a group name"))
        if group is None:
            return {"error_code": int(error)}
        return {"error_code": 0, "group_type": group.group_type, "state": group.state}

    async def remove_group_member(self, args: dict, conn) -> dict:
        """Take a member out of a consumer or share group, named by its member id (or a consumer group's
        static member by its group.instance.id), as if it had left; its partitions go to the others.
        Classic groups are left to LeaveGroup, which Kafka's admin client sends."""
        group_id, wanted = _named(args, "group_id", "a group name"), _named(args, "member", "a member")
        error, group = self._coordinated(group_id)
        if group is None:
            return {"error_code": int(error)}
        if group.group_type == "classic":
            raise ValueError(f"group {group_id} is a classic group: remove its members with LeaveGroup")
        member = group.members.get(wanted) or next(
            (m for m in group.members.values() if getattr(m, "instance_id", None) == wanted), None)
        if member is None:
            return {"error_code": int(ErrorCode.UNKNOWN_MEMBER_ID)}
        try:
            await _done(getattr(self.broker.groups, group.group_type).remove_member(group, member.member_id))
        except GroupError as exc:
            return {"error_code": int(exc.code)}
        return {"error_code": 0, "group_type": group.group_type, "member_id": member.member_id,
                "group_instance_id": getattr(member, "instance_id", None), "group_epoch": group.group_epoch}

    def _coordinated(self, group_id: str) -> tuple[ErrorCode, object | None]:
        """The group, if this node coordinates it and it exists."""
        error = self.broker.groups.owns(group_id)
        group = None if error else self.broker.groups.group(group_id)
        if group is None or group.state == "Dead":
            return error or ErrorCode.GROUP_ID_NOT_FOUND, None
        return ErrorCode.NONE, group

    async def share_state(self, args: dict, conn) -> dict:
        """A share-partition's state through this node's persister, as a partition leader here would
        call it (args["action"]: read, write, initialize, read_summary or delete): the share
        coordinator may be on another node. Answers {"error_code", "state"}."""
        topic = self.broker.topic(_named(args, "topic", "a topic name"))
        if topic is None:
            raise ValueError(f"no topic {args['topic']!r}")
        where = (_named(args, "group_id", "a group name"), topic.topic_id, int(args.get("partition", 0)))
        persister, action = self.broker.share_persister, args.get("action")
        try:
            if action == "read":
                state = await persister.read(*where, int(args.get("leader_epoch", -1)))
            elif action == "read_summary":
                state = await persister.read_summary(*where)
            elif action == "write":
                state = None
                await persister.write(*where, ShareState(args["state_epoch"], args["leader_epoch"], args["start_offset"],
                                                         [StateBatch(*batch) for batch in args.get("batches", [])]))
            elif action == "initialize":
                state = None
                await persister.initialize(*where, args["state_epoch"], args["start_offset"])
            elif action == "delete":
                state = None
                await persister.delete(*where)
            else:
                raise ValueError(f"share_state: no action {action!r}")
        except CoordinatorError as exc:
            return {"error_code": int(exc.code), "state": None}
        return {"error_code": 0, "state": None if state is None else {
            "state_epoch": state.state_epoch, "leader_epoch": state.leader_epoch, "start_offset": state.start_offset,
            "batches": [[b.first_offset, b.last_offset, b.delivery_state, b.delivery_count] for b in state.batches]}}


async def _done(outcome) -> None:
    """Wait for a membership change that writes its records before it returns."""
    if inspect.isawaitable(outcome):
        await outcome


def _named(args: dict, key: str, what: str) -> str:
    name = args.get(key)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{key}: expected {what}, got {name!r}")
    return name

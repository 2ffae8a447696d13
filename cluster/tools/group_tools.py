"""Group rebalances on demand, for testing rebalance listeners, of every group type.

- rebalance: the group's coordinator starts a rebalance exactly as a member joining the group
  would (asked through its node's admin port, since Kafka has no request for it); a consumer
  group (KIP-848) has its group epoch bumped and a new target assignment computed;
- remove_member: of a classic group, Kafka's RemoveMembersFromGroup, sent by a real admin client
  as Kafka's AdminClient sends it: a LeaveGroup v3+ naming a static member by its
  group.instance.id (and no member id), or a dynamic member by its member id; of a consumer or
  share group, the coordinator takes the member out as if it had left (admin port);
- move_coordinator: the group's `__consumer_offsets` partition gets another in-sync leader,
  which becomes its preferred replica too, so the members must find the new coordinator;
- share_partitions: a share group's records in flight on each partition, from the partitions'
  leaders (KIP-932 keeps them there, not at the coordinator).

Every refusal is a ClusterError; one that carries Kafka's error code is a GroupRefused, which
the command line words as Kafka's tools do.
"""
from __future__ import annotations

from kafka import KafkaAdminClient
from kafka import errors as kafka_errors
from kafka.admin import MemberToRemove

from cluster.formats.control import ControlError
from cluster.formats.errors import ErrorCode
from cluster.tools.errors import ClusterError, GroupRefused

# What Kafka's AdminClient.removeMembersFromConsumerGroup sends as the LeaveGroup reason (KIP-800).
REMOVE_REASON = "member was removed by an admin"


def _unknown_group(group_id: str) -> GroupRefused:
    return GroupRefused(group_id, ErrorCode.GROUP_ID_NOT_FOUND)


def first_answer(cluster, op: str, **args) -> dict:
    """What the first running node that answers says to `op` on its admin port."""
    for node_id in sorted(cluster.nodes):
        try:
            return cluster.node_control(node_id, op, timeout=5, **args)
        except (ClusterError, ControlError, OSError):
            continue
    raise ClusterError("no running node answers on its admin port")


def coordinator_placement(cluster, group_id: str) -> dict:
    """{"topic", "partition", "coordinator"}: the group's `__consumer_offsets` partition and its
    leader, as the first running node that answers sees them (coordinator -1: none yet)."""
    return first_answer(cluster, "group_coordinator", group_id=group_id)


def _on_coordinator(cluster, group_id: str, op: str, **args) -> tuple[int, dict]:
    """(coordinator node id, its answer to `op` about the group); a refusal is a GroupRefused."""
    placement = coordinator_placement(cluster, group_id)
    if placement["coordinator"] < 0:
        raise _unknown_group(group_id)
    try:
        reply = cluster.node_control(placement["coordinator"], op, group_id=group_id, **args)
    except ControlError as exc:
        raise ClusterError(str(exc)) from None
    if reply["error_code"]:
        raise GroupRefused(group_id, reply["error_code"], args.get("member"))
    return placement["coordinator"], reply


def share_partitions(cluster, group_id: str) -> list[dict]:
    """Each partition a share group has read, as its leader holds it: the share-partition's start and end
    offsets and how many records between them are available, acquired, acknowledged and archived.
    Nodes that do not answer (down, paused) are left out."""
    found = []
    for node_id in sorted(cluster.nodes):
        try:
            reply = cluster.node_control(node_id, "share_partitions", timeout=5, group_id=group_id)
        except (ClusterError, ControlError, OSError):
            continue
        found.extend({**partition, "leader": node_id} for partition in reply["partitions"])
    return sorted(found, key=lambda p: (p["topic"], p["partition"]))


def group_type(cluster, group_id: str) -> str:
    """classic, consumer or share, as the group's coordinator knows it."""
    return _on_coordinator(cluster, group_id, "group_type")[1]["group_type"]


def rebalance(cluster, group_id: str) -> dict:
    """Start a rebalance of the group; returns its type, state and members, and the generation a classic
    group is leaving or the group epoch a consumer group moved to."""
    coordinator, reply = _on_coordinator(cluster, group_id, "rebalance_group")
    if not reply["members"]:
        raise ClusterError(f"consumer group '{group_id}' has no active members: there is nothing to rebalance.")
    return {"group_id": group_id, "coordinator": coordinator, **reply}


def _admin(cluster) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, client_id="kraftwerk",
                            **cluster.kafka_python_config())


def _described(admin: KafkaAdminClient, group_id: str) -> dict:
    described = admin.describe_groups([group_id])[group_id]
    if described["group_state"] == "Dead":
        raise _unknown_group(group_id)
    return described


def remove_member(cluster, group_id: str, member: str) -> dict:
    """Remove a member, named by its group.instance.id (a static member) or its member id."""
    if group_type(cluster, group_id) != "classic":
        reply = _on_coordinator(cluster, group_id, "remove_group_member", member=member)[1]
        return {"group_id": group_id, "member_id": None if reply["group_instance_id"] == member else member,
                "group_instance_id": reply["group_instance_id"] if reply["group_instance_id"] == member else None,
                "group_type": reply["group_type"], "group_epoch": reply["group_epoch"]}
    admin = _admin(cluster)
    try:
        described = _described(admin, group_id)
        static = any(m.get("group_instance_id") == member for m in described["members"])
        target = MemberToRemove(group_instance_id=member, reason=REMOVE_REASON) if static else \
            MemberToRemove(member_id=member, reason=REMOVE_REASON)
        try:
            outcome = next(iter(admin.remove_group_members(group_id, [target]).values()))
        except kafka_errors.BrokerResponseError as exc:
            raise GroupRefused(group_id, exc.errno) from None
    finally:
        admin.close()
    if outcome is kafka_errors.UnknownMemberIdError:
        raise GroupRefused(group_id, ErrorCode.UNKNOWN_MEMBER_ID, member)
    if outcome is not kafka_errors.NoError:
        raise GroupRefused(group_id, outcome.errno)
    return {"group_id": group_id, "member_id": None if static else member,
            "group_instance_id": member if static else None}


def move_coordinator(cluster, group_id: str, to: int | None = None) -> dict:
    """Move the group's coordinator to node `to` (default: the controller picks another in-sync
    replica); returns once every running node knows the new leader. Any group type: its coordinator
    is the leader of its `__consumer_offsets` partition."""
    group_type(cluster, group_id)  # the group must exist
    placement = coordinator_placement(cluster, group_id)
    reply = cluster.control("move_leader", topic=placement["topic"], partition=placement["partition"], target=to)
    partition = f"{placement['topic']}-{placement['partition']}"
    if reply["error_code"] == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE:
        wanted = f"node {to} is not a live in-sync replica of {partition}" if to is not None else \
            f"{partition} has no other live in-sync replica"
        raise ClusterError(f"cannot move the coordinator of consumer group '{group_id}': {wanted}.")
    if reply["error_code"]:
        error = kafka_errors.for_code(reply["error_code"])
        raise ClusterError(f"cannot move the coordinator of consumer group '{group_id}': "
                           f"{error.description} ({error.message})")
    running = {b["node_id"] for b in cluster.status()["brokers"] if not b["fenced"]}
    cluster.wait_ready(sorted(running & {n for n, node in cluster.nodes.items() if node.alive()}))
    return {"group_id": group_id, "partition": partition, "from": placement["coordinator"], "to": reply["leader"]}

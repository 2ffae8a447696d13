"""Partition reassignment as Kafka's controller runs it (KIP-455).

A reassignment is written as a PartitionChangeRecord whose replicas are the target followed by
the replicas being dropped, with `adding_replicas` (target minus current) and
`removing_replicas` (current minus target). The new replicas are ordinary followers: they
catch up by replication and their leader adds them to the ISR. Every partition change then
checks whether the move can complete (Kafka's PartitionChangeBuilder
completeReassignmentIfNeeded): once every adding replica is in the ISR, replicas become the
target, the removing ones leave the ISR, and a leader being removed hands over to the first
in-sync target replica. Cancelling (a null target) reverts to the original replicas.

Requests are bounded before they are read (more than 10,000 partitions: POLICY_VIOLATION).
"""
from __future__ import annotations

from cluster.formats.control import BadControlRequest
from cluster.formats.errors import ErrorCode
from cluster.formats.image import MetadataImage, PartitionInfo
from controller.arguments import expect, expect_list, optional
from cluster.runtime.time_slices import TimeSlice, gently
from controller.topics import MAX_RECORDS_PER_USER_OP, Outcome, RequestError, checked_replicas, refuse_too_large

NO_REASSIGNMENT = "No partition reassignment is in progress."


def is_reassigning(partition: PartitionInfo) -> bool:
    return bool(partition.adding_replicas or partition.removing_replicas)


async def alter_reassignments(image: MetadataImage, brokers: list[int], requests: list) -> Outcome:
    """requests: [{"name", "partitions": [{"partition", "replicas": [ids] or None}]}]; brokers: the unfenced ones.

    results: per topic {"name", "partitions": [{"partition", "error_code", "error_message"}]}."""
    if len(expect_list(requests, "topics")) > MAX_RECORDS_PER_USER_OP or sum(
            len(expect_list(expect(t, dict, "topic").get("partitions"), "partitions")) for t in requests
    ) > MAX_RECORDS_PER_USER_OP:
        return refuse_too_large()
    outcome, time_slice = Outcome(), TimeSlice()
    async for request in gently(requests, time_slice):
        name = expect(request.get("name"), str, "topic name")
        results = []
        async for item in gently(request["partitions"], time_slice):
            index, target = _reassignable_partition(item)
            try:
                record = _reassignment_record(image, brokers, name, index, target)
            except RequestError as exc:
                results.append({"partition": index, "error_code": int(exc.code), "error_message": exc.message})
                continue
            if record is not None:
                outcome.records.append(record)
            results.append({"partition": index, "error_code": 0, "error_message": None})
        outcome.results.append({"name": name, "partitions": results})
    return outcome


def _reassignable_partition(item) -> tuple[int, list | None]:
    expect(item, dict, "partition")
    replicas = optional(item.get("replicas"), (list, tuple), "replicas")
    return expect(item.get("partition"), int, "partition"), replicas


def _reassignment_record(image, brokers, name: str, index: int, target: list | None):
    topic = image.topics.get(name)
    partition = topic.partitions.get(index) if topic else None
    if partition is None:
        raise RequestError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {name}:{index}.")
    if target is None:
        if not is_reassigning(partition):
            raise RequestError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, NO_REASSIGNMENT)
        change = _reverted(partition, name, image.topic_configs(name).get("unclean.leader.election.enable") == "true")
    else:
        # Kafka checks a target as any manual assignment, but does not require its nodes to be up: a
        # replica on a fenced node catches up (and the move completes) once the node is back.
        target = checked_replicas(image, sorted(set(image.brokers) | set(brokers)), index, target, None)
        change = _towards(partition, target)
    change = settle(image, partition, change)
    if not change:
        return None
    return "PartitionChangeRecord", {"partition_id": index, "topic_id": topic.topic_id, **change}


def _towards(partition: PartitionInfo, target: list[int]) -> dict:
    """Kafka's PartitionReassignmentReplicas: the target first, then the current replicas it drops."""
    removing = [r for r in partition.replicas if r not in target]
    adding = [r for r in target if r not in partition.replicas]
    return {"replicas": list(target) + removing, "isr": list(partition.isr),
            "removing_replicas": removing, "adding_replicas": adding}


def _reverted(partition: PartitionInfo, name: str, unclean_allowed: bool) -> dict:
    """Kafka's PartitionReassignmentRevert: the replicas being added go, the original set stays. If
    only added replicas are in sync, going back means an unclean election: refused unless allowed."""
    replicas = [r for r in partition.replicas if r not in partition.adding_replicas]
    isr = [r for r in partition.isr if r not in partition.adding_replicas]
    if not isr:
        if not unclean_allowed:
            raise RequestError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                               f"Unable to revert partition assignment for {name}:{partition.partition} "
                               f"because it would require an unclean leader election.")
        isr = replicas[:1]
    return {"replicas": replicas, "isr": isr, "removing_replicas": [], "adding_replicas": []}


def settle(image: MetadataImage, partition: PartitionInfo, change: dict) -> dict:
    """A partition change with the reassignment completed if it can be, a new leader if the current
    one leaves the ISR or the replicas, and only the fields that differ from the partition's."""
    target = {"replicas": partition.replicas, "isr": partition.isr,
              "removing_replicas": partition.removing_replicas, "adding_replicas": partition.adding_replicas,
              **change}
    _complete_if_needed(target)
    leader = partition.leader
    if leader not in target["isr"] or leader not in target["replicas"]:
        live = {b.node_id for b in image.brokers.values() if not b.fenced}
        candidates = [r for r in target["replicas"] if r in target["isr"] and r in live]
        leader = candidates[0] if candidates else -1
    changed = {name: list(value) for name, value in target.items() if list(value) != getattr(partition, name)}
    if leader != partition.leader:
        changed["leader"] = leader
    return changed


def _complete_if_needed(target: dict) -> None:
    """Kafka's PartitionReassignmentReplicas.maybeCompleteReassignment, on the change being built."""
    adding, removing = target["adding_replicas"], target["removing_replicas"]
    if not (adding or removing) or not set(adding) <= set(target["isr"]):
        return
    isr = [r for r in target["isr"] if r not in removing]
    if not isr:
        return  # the only in-sync replicas are leaving: wait for a target replica to catch up
    target.update(replicas=[r for r in target["replicas"] if r not in removing], isr=isr,
                  removing_replicas=[], adding_replicas=[])


async def list_reassignments(image: MetadataImage, requested: list | None) -> list[dict]:
    """Ongoing reassignments, of every partition or of [[topic, [partitions]], ...]; unknown ones are
    left out, as Kafka does."""
    if requested is None:
        wanted = ((t, sorted(t.partitions)) for t in list(image.topics.values()))
    else:
        if len(expect_list(requested, "topics")) > MAX_RECORDS_PER_USER_OP:
            raise RequestError(ErrorCode.POLICY_VIOLATION, "Unable to perform excessively large batch operation.")
        wanted = (_listed_topic(image, item) for item in requested)
    listed, time_slice = [], TimeSlice()
    async for topic, indexes in gently(wanted, time_slice):
        if topic is None:
            continue
        # A request may name any number of partitions: they are looked up a slice at a time too.
        moving = [_ongoing(p) async for p in gently((topic.partitions.get(expect(i, int, "partition"))
                                                       for i in indexes), time_slice) if p and is_reassigning(p)]
        if moving:
            listed.append({"name": topic.name, "partitions": moving})
    return listed


def _ongoing(partition: PartitionInfo) -> dict:
    return {"partition": partition.partition, "replicas": partition.replicas,
            "adding_replicas": partition.adding_replicas, "removing_replicas": partition.removing_replicas}


def _listed_topic(image: MetadataImage, item) -> tuple:
    if len(expect_list(item, "topic")) != 2:
        raise BadControlRequest(f"topic: expected [name, partitions], got {item!r}")
    return image.topics.get(expect(item[0], str, "topic name")), expect_list(item[1], "partitions")

"""Online migration between classic groups and KIP-848 consumer groups (Kafka's GroupMetadataManager
validateOnlineUpgrade/convertToConsumerGroup and validateOnlineDowngrade*/convertToClassicGroup).

Upgrade: the first ConsumerGroupHeartbeat (epoch 0) to a classic group whose members all use the
"consumer" protocol type turns the group into a consumer group when
`group.consumer.migration.policy` allows it. Its members stay, speaking the classic protocol inside
the consumer group (node.groups.consumer_classic_members): each keeps its generation as its member
epoch, its last assignment as both its current and its target assignment, and its subscription
as read from its JoinGroup metadata. The joining member then bumps the group epoch and the
consumer-group machinery rebalances. An empty classic group is simply replaced, whatever the policy.

Downgrade: when the last member of the consumer protocol leaves (or is fenced) and members remain
that all speak the classic protocol, the policy permitting, the group becomes a classic group again
at generation = group epoch, each member holding its target assignment, and a rebalance starts.
When instead a classic static member takes the place of the last consumer-protocol member (same
group.instance.id), the group becomes classic as it stands, with no rebalance.

Records, as Kafka writes them: on upgrade the classic group's tombstone, then every member's
MemberMetadata, the group epoch, every member's target assignment, the target assignment epoch and
every member's current assignment; on downgrade the consumer group's tombstones, then the classic
group's GroupMetadata. A coordinator that replays the partition ends with the last of them.
"""
from __future__ import annotations

import logging
import struct
import time
import uuid
from collections.abc import Callable

from node.groups import consumer_records as records
from node.groups.classic import STABLE as CLASSIC_STABLE, ClassicGroup, ClassicMember, select_protocol
from node.groups.consumer import (
    MEMBER_STABLE, Assignment, ClassicMemberMetadata, ConsumerGroup, ConsumerMember,
)
from node.groups.records import (
    assignment_user_data, decode_assignment, decode_subscription, encode_assignment, group_key, protocol_version,
)

log = logging.getLogger(__name__)

CONSUMER_PROTOCOL_TYPE = "consumer"
POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")

TopicIdOf = Callable[[str], "uuid.UUID | None"]
TopicNameOf = Callable[[uuid.UUID], "str | None"]


class MalformedProtocol(ValueError):
    """Embedded consumer-protocol bytes that cannot be read (Kafka's SchemaException)."""


class CustomAssignorData(ValueError):
    """An assignment carrying user data, which only a custom assignor writes and a consumer group
    would lose (Kafka's UnsupportedVersionException in fromClassicGroup)."""


class NotUpgraded(Exception):
    """A classic group with members that does not become a consumer group: the heartbeat that asked
    is answered GROUP_ID_NOT_FOUND with this message, Kafka's, and the group is left as it was."""


def upgrade_enabled(policy: str) -> bool:
    return policy.lower() in ("bidirectional", "upgrade")


def downgrade_enabled(policy: str) -> bool:
    return policy.lower() in ("bidirectional", "downgrade")


# --- upgrade ---

def check_upgrade(group: ClassicGroup, policy: str, consumer_max_size: int) -> None:
    """Kafka's validateOnlineUpgrade, for a classic group with members: raises NotUpgraded."""
    why = None
    if not upgrade_enabled(policy):
        why = "online upgrade is disabled"
    elif group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        why = "the group does not use the consumer embedded protocol"
    elif len(group.members) > consumer_max_size:
        why = "the group size exceeds the consumer group maximum size"
    if why is not None:
        log.info("cannot upgrade classic group %s to consumer group because %s", group.group_id, why)
        raise NotUpgraded(f"Cannot upgrade classic group {group.group_id} to consumer group because {why}.")


def consumer_group_from_classic(classic: ClassicGroup, topic_id_of: TopicIdOf) -> ConsumerGroup:
    """Kafka's ConsumerGroup.fromClassicGroup. Every member is stable at the group's generation; one
    that was mid-rebalance learns on its next Heartbeat that it must rejoin."""
    group = ConsumerGroup(classic.group_id, classic.partition)
    group.group_epoch = group.assignment_epoch = classic.generation
    for old in classic.members.values():
        try:
            subscription = decode_subscription(old.metadata_for(classic.protocol or ""))
            owned = decode_assignment(old.assignment)
            user_data = assignment_user_data(old.assignment)
        except (ValueError, struct.error, UnicodeDecodeError) as exc:
            raise MalformedProtocol(f"member {old.member_id}: {exc}") from exc
        if user_data:
            raise CustomAssignorData(f"member {old.member_id}: userData from a custom assignor would be lost")
        assigned = _to_ids(owned, topic_id_of)
        group.members[old.member_id] = ConsumerMember(
            old.member_id, instance_id=old.group_instance_id, rack_id=subscription.rack_id,
            client_id=old.client_id, client_host=old.client_host, member_epoch=classic.generation,
            previous_member_epoch=classic.generation, state=MEMBER_STABLE,
            rebalance_timeout_ms=old.rebalance_timeout_ms, subscribed_topic_names=list(subscription.topics),
            assigned=assigned, classic=ClassicMemberMetadata(old.session_timeout_ms, list(old.protocols)))
        group.target[old.member_id] = {topic_id: set(ps) for topic_id, ps in assigned.items()}
        if old.group_instance_id:
            group.static_members[old.group_instance_id] = old.member_id
    group.update_state()
    return group


# --- downgrade ---

def all_classic_except(group: ConsumerGroup, member_ids: set[str]) -> bool:
    """Kafka's allMembersUseClassicProtocolExcept: every member but these speaks the classic protocol."""
    return all(m.classic is not None for m in group.members.values() if m.member_id not in member_ids)


def can_downgrade_without(group: ConsumerGroup, leaving: set[str], policy: str, classic_max_size: int) -> bool:
    """Kafka's validateOnlineDowngradeWithFencedMembers: the members leaving (or fenced) leave only
    members of the classic protocol, at least one."""
    remaining = sum(member_id not in leaving for member_id in group.members)
    if not all_classic_except(group, leaving) or remaining <= 0:
        return False
    if not downgrade_enabled(policy):
        log.info("cannot downgrade consumer group %s to classic group because the online downgrade is disabled",
                 group.group_id)
        return False
    if remaining > classic_max_size:
        log.info("cannot downgrade consumer group %s to classic group because its group size is greater than "
                 "classic group max size", group.group_id)
        return False
    return True


def classic_group_from_consumer(group: ConsumerGroup, leaving: set[str], topic_name_of: TopicNameOf) -> ClassicGroup:
    """Kafka's ClassicGroup.fromConsumerGroup: Stable at generation = group epoch, without the
    leaving members, each member holding its target assignment in its own protocol version."""
    classic = ClassicGroup(group.group_id, group.partition, state=CLASSIC_STABLE, generation=group.group_epoch,
                           protocol_type=CONSUMER_PROTOCOL_TYPE, state_timestamp=int(time.time() * 1000))
    for member in group.members.values():
        if member.member_id in leaving or member.classic is None:
            continue
        classic.members[member.member_id] = ClassicMember(
            member.member_id, member.instance_id, member.client_id, member.client_host,
            member.classic.session_timeout_ms, member.rebalance_timeout_ms, CONSUMER_PROTOCOL_TYPE,
            list(member.classic.supported_protocols))
    classic.protocol = select_protocol(classic)
    for member in classic.members.values():
        metadata = member.metadata_for(classic.protocol)
        try:
            version = protocol_version(metadata)
        except struct.error as exc:
            raise MalformedProtocol(f"member {member.member_id}: {exc}") from exc
        member.assignment = encode_assignment(_to_names(group.target.get(member.member_id, {}), topic_name_of),
                                              version)
    return classic


def classic_group_tombstone(group_id: str) -> tuple[bytes, None]:
    return group_key(group_id), None


def consumer_group_records(group: ConsumerGroup) -> list[tuple[bytes, bytes]]:
    """Kafka's ConsumerGroup.createConsumerGroupRecords: what a group converted from a classic
    group is written as, each member's target assignment being its current one."""
    gid = group.group_id
    members = list(group.members.values())
    out = [(records.key(records.MEMBER_METADATA, gid, m.member_id), records.member_metadata_value(
        records.MemberMetadata(m.instance_id, m.rack_id, m.client_id, m.client_host, list(m.subscribed_topic_names),
                               m.subscribed_topic_regex, m.rebalance_timeout_ms, m.server_assignor, m.classic)))
           for m in members]
    out.append((records.key(records.GROUP_METADATA, gid), records.group_metadata_value(group.group_epoch)))
    out.extend((records.key(records.TARGET_ASSIGNMENT_MEMBER, gid, m.member_id),
                records.target_assignment_member_value(group.target.get(m.member_id, {}))) for m in members)
    out.append((records.key(records.TARGET_ASSIGNMENT_METADATA, gid),
                records.target_assignment_metadata_value(group.assignment_epoch)))
    out.extend((records.key(records.CURRENT_MEMBER_ASSIGNMENT, gid, m.member_id), records.current_assignment_value(
        records.MemberAssignment(m.member_epoch, m.previous_member_epoch, m.state, m.assigned, m.pending_revocation)))
        for m in members)
    return out


# --- topic ids and names ---

def _to_ids(partitions: dict[str, list[int]], topic_id_of: TopicIdOf) -> Assignment:
    """Topics the cluster no longer has are left out, as Kafka's toTopicPartitionMap does."""
    result: Assignment = {}
    for name, numbers in partitions.items():
        topic_id = topic_id_of(name)
        if topic_id is not None and numbers:
            result.setdefault(topic_id, set()).update(numbers)
    return result


def _to_names(assignment: Assignment, topic_name_of: TopicNameOf) -> dict[str, list[int]]:
    result: dict[str, list[int]] = {}
    for topic_id, numbers in assignment.items():
        name = topic_name_of(topic_id)
        if name is not None and numbers:
            result[name] = sorted(numbers)
    return result


# --- the coordinator's side: converting the group in its map, with its records ---

class GroupMigration:
    """Converts groups of the coordinator's group map (`directory.groups`) between the protocols,
    writing what Kafka writes for it. The consumer membership calls upgrade() from the first
    heartbeat of a member to a classic group, and downgrade_instead_of_removing() wherever it removes
    a member; a classic static member replacing a consumer-protocol one calls downgrade_if_all_classic()."""

    def __init__(self, broker, directory):
        self.broker = broker
        self.directory = directory

    def policy(self) -> str:
        return self.broker.config.get("group.consumer.migration.policy") or "bidirectional"

    def upgrade(self, classic: ClassicGroup, out: list) -> ConsumerGroup:
        """The consumer group a classic group with members becomes, its records added to `out`. Raises
        NotUpgraded when the policy, its protocol type or its size forbid it, or its members' embedded
        protocol cannot be read. The group map is not touched: the caller installs the group once the
        joining member is accepted."""
        check_upgrade(classic, self.policy(), self.broker.config.get_int("group.consumer.max.size"))
        try:
            group = consumer_group_from_classic(classic, self._topic_id)
        except MalformedProtocol as exc:
            log.warning("cannot upgrade classic group %s to consumer group: the embedded consumer protocol is "
                        "malformed (%s)", classic.group_id, exc)
            raise NotUpgraded(f"Cannot upgrade classic group {classic.group_id} to consumer group because the "
                              "embedded consumer protocol is malformed.") from exc
        except CustomAssignorData as exc:
            log.warning("cannot upgrade classic group %s to consumer group: %s", classic.group_id, exc)
            raise NotUpgraded(f"Cannot upgrade classic group {classic.group_id} to consumer group because an "
                              "unsupported custom assignor is in use. Please refer to the documentation or switch "
                              "to a default assignor before re-attempting the upgrade.") from exc
        self.directory.classic.release_waiting(classic)
        out.append(classic_group_tombstone(classic.group_id))
        out.extend(consumer_group_records(group))
        for member in group.members.values():
            self.directory.classic_members.arm_session(group, member)
        log.info("converted classic group %s (generation %d, %d members) to a consumer group", classic.group_id,
                 classic.generation, len(group.members))
        return group

    def empty_classic_tombstone(self, group) -> list:
        """An empty classic group is replaced by a consumer group whatever the policy (Kafka's
        maybeDeleteEmptyClassicGroup): its record's tombstone; its offsets stay."""
        return [classic_group_tombstone(group.group_id)] if group is not None else []

    def downgrade_instead_of_removing(self, group: ConsumerGroup, leaving: set[str], out: list) -> bool:
        """When the members leaving (or fenced) leave only members of the classic protocol and the
        policy allows, the group becomes a classic group without them and rebalances (Kafka's
        consumerGroupFenceMembers with convertToClassicGroup): True, its records added to `out`."""
        if not can_downgrade_without(group, leaving, self.policy(), _classic_max_size(self.broker)):
            return False
        return self._downgrade(group, leaving, out, rebalance=True)

    def downgrade_if_all_classic(self, group: ConsumerGroup, rebalance: bool, out: list) -> bool:
        """A classic static member took the place of the group's last consumer-protocol member
        (Kafka's validateOnlineDowngradeWithReplacedMember): when the policy allows, the group
        becomes a classic group as it stands, each member keeping its assignment; it rebalances only
        when the new member's subscription differs from the one it replaced. True, its records added
        to `out`."""
        if not group.members or not can_downgrade_without(group, set(), self.policy(), _classic_max_size(self.broker)):
            return False
        return self._downgrade(group, set(), out, rebalance)

    def _downgrade(self, group: ConsumerGroup, leaving: set[str], out: list, rebalance: bool) -> bool:
        try:
            classic = classic_group_from_consumer(group, leaving, self._topic_name)
        except MalformedProtocol as exc:
            log.warning("cannot downgrade consumer group %s to classic group: %s", group.group_id, exc)
            return False
        out.extend(self.directory.consumer.tombstones(group))
        out.append(classic.record())
        self._install_classic(group, classic, rebalance)
        log.info("converted consumer group %s (epoch %d) to a classic group", group.group_id, group.group_epoch)
        return True

    def _install_classic(self, group: ConsumerGroup, classic: ClassicGroup, rebalance: bool) -> None:
        self._forget(group)
        self.directory.groups[group.group_id] = classic
        self.directory.classic.adopt(classic, rebalance)

    def _forget(self, group: ConsumerGroup) -> None:
        group.cancel_timers()
        self.directory.classic_members.forget(group.group_id)

    def _topic_id(self, name: str) -> uuid.UUID | None:
        topic = self.broker.topic(name)
        return topic.topic_id if topic is not None else None

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        topic = self.broker.topic_by_id(topic_id)
        return topic.name if topic is not None else None


def _classic_max_size(broker) -> int:
    """group.max.size, Kafka's limit of a classic group (unlimited unless set)."""
    value = broker.config.get("group.max.size")
    return int(value) if value else 2**31 - 1

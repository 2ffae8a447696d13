"""KIP-848 consumer groups: ConsumerGroupHeartbeat, and the group epochs and assignments it moves."""
from __future__ import annotations

from node.groups.consumer import ConsumerGroup


class ConsumerMembership:
    """The consumer protocol, run on the consumer groups of the coordinator's group map."""

    def __init__(self, broker, directory, group_log):
        self.broker = broker
        self.directory = directory
        self.group_log = group_log

    def force_rebalance(self, group: ConsumerGroup) -> None:
        """Bump the group epoch and compute a new target assignment, as a member joining would."""
        raise NotImplementedError

    def remove_member(self, group: ConsumerGroup, member_id: str) -> None:
        """Take a member out of the group as if it had left (heartbeat with epoch -1)."""
        raise NotImplementedError

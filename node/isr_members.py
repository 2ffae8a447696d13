"""Which partitions led here have each follower in their ISR, kept up as terms are taken.

Kafka's isr-expiration task visits every partition every replica.lag.time.max.ms / 2. Here the
task asks, per follower, only about the partitions it may be behind on (see
ReplicaManager.shrink_lagging_isrs), so an idle node's cost does not grow with its partitions;
this index is what lets it find a follower's partitions without visiting the others.
"""
from __future__ import annotations

Key = tuple[str, int]


class IsrMembers:
    def __init__(self):
        self._followers_of: dict[Key, tuple[int, ...]] = {}
        self._led_with: dict[int, set[Key]] = {}

    def track(self, key: Key, followers: tuple[int, ...]) -> None:
        """The ISR of a partition led here now holds these followers (empty: led elsewhere, or alone)."""
        self.forget(key)
        if followers:
            self._followers_of[key] = followers
            for follower in followers:
                self._led_with.setdefault(follower, set()).add(key)

    def forget(self, key: Key) -> None:
        for follower in self._followers_of.pop(key, ()):
            led = self._led_with[follower]
            led.discard(key)
            if not led:
                del self._led_with[follower]

    def followers(self) -> list[int]:
        return list(self._led_with)

    def led_with(self, follower: int) -> set[Key]:
        """The partitions led here whose ISR holds follower (a set the caller must not change)."""
        return self._led_with.get(follower, set())

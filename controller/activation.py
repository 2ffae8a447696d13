"""Whether this controller is the quorum's active one, and what it does when it becomes so.

Kafka's QuorumController acts only while it leads the Raft quorum and once it has applied the log
up to the start of its own epoch; every other controller answers NOT_CONTROLLER. Here the same
holds: operations wait (briefly) for a leader just elected to catch up, and are refused with
`NotController`, naming the leader when it is known, on any other controller. On taking over, the
controller starts every unfenced broker's session afresh and, in a new cluster, writes the first
records (metadata.version and the --add-scram users).
"""
from __future__ import annotations

import logging
from typing import Callable

from cluster.formats.control import NotController
from controller.bootstrap_records import first_records
from controller.metadata_writer import MetadataWriter

log = logging.getLogger(__name__)

# How long a request to a controller just elected waits for it to apply the log up to its own epoch.
ACTIVATION_WAIT_S = 5.0


class Activation:
    def __init__(self, writer: MetadataWriter, on_take_over: Callable[[], None], bootstrap_scram: list[str] = ()):
        self.writer = writer
        self.on_take_over = on_take_over
        self.bootstrap_scram = list(bootstrap_scram)
        self.epoch = -1  # the quorum epoch this controller last took over in

    @property
    def active(self) -> bool:
        return self.writer.is_active and self.epoch == self.writer.quorum.replica.epoch

    async def until_active(self) -> None:
        """Return when this controller may act; NotController (naming the leader if known) when it
        does not lead. A leader just elected first applies the log up to its own epoch."""
        if self.active:
            return
        if self.writer.quorum.is_leader and await self.writer.wait_for(lambda: self.active, ACTIVATION_WAIT_S):
            return
        raise self.writer.quorum.not_controller()

    async def follow_quorum(self) -> None:
        """Take over each time this controller becomes the active one."""
        while True:
            await self.writer.wait_for(lambda: self.writer.is_active and not self.active, 3600)
            if self.writer.is_active and not self.active:
                self.take_over()
                try:
                    await self.write_first_records()
                except NotController:
                    pass  # deposed meanwhile: the next leader writes them

    def take_over(self) -> None:
        self.on_take_over()
        self.epoch = self.writer.quorum.replica.epoch
        log.info("active controller in quorum epoch %d", self.epoch)

    async def write_first_records(self) -> None:
        if "metadata.version" not in self.writer.image.features:
            async with self.writer.exclusive:
                await self.writer.append(first_records(self.bootstrap_scram))
        await self.writer.notify()

    async def quorum_role(self, args: dict, conn) -> dict:
        """The `quorum_role` op, which any controller answers: where it stands in the quorum."""
        replica = self.writer.quorum.replica
        return {"node_id": replica.node_id, "role": replica.role.value, "epoch": replica.epoch,
                "leader_id": replica.leader_id, "active": self.active, "high_watermark": replica.high_watermark,
                "log_end_offset": self.writer.log.log_end_offset}

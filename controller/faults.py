"""Faults a controller can be told to act out while its process lives on: isolation and latency.

Isolation cuts the controller off from the other controllers, as a network partition would: the
Raft messages it sends are dropped and the ones it receives are ignored, so an isolated leader
resigns once a majority has not fetched from it for 1.5 fetch timeouts (check-quorum) and the
others elect a new one. Requests from nodes and the launcher are answered with NotController,
naming no leader, so that they go to another controller at once.

Latency (`delay`) holds every Raft message this controller sends, and every request it answers,
for the given milliseconds.

Differs from a node's isolation (node/faults.py), which holds requests unanswered: a node whose
controller does not answer would wait for it rather than find the quorum's new leader.
"""
from __future__ import annotations

import asyncio
import logging

from cluster.formats.control import NotController

log = logging.getLogger(__name__)

# Operations an isolated controller still answers: the faults themselves and where it stands.
ANSWERED_WHILE_ISOLATED = ("isolate", "heal", "delay", "describe_faults", "quorum_role")


class ControllerFaults:
    def __init__(self) -> None:
        self.isolated = False
        self.delay_ms = 0

    def describe(self) -> dict:
        return {"isolated": self.isolated, "delay_ms": self.delay_ms}

    async def before_request(self, op: str) -> None:
        """Act out the faults on one control request before it is served."""
        if self.isolated and op not in ANSWERED_WHILE_ISOLATED:
            raise NotController(None, "this controller is isolated from the quorum")
        if self.delay_ms and op not in ANSWERED_WHILE_ISOLATED:
            await asyncio.sleep(self.delay_ms / 1000)

    def operations(self) -> dict:
        return {"isolate": self._isolate, "heal": self._heal, "delay": self._delay,
                "describe_faults": self._describe}

    async def _isolate(self, args: dict, conn) -> dict:
        self.isolated = True
        log.warning("isolated from the other controllers and the nodes until healed")
        return self.describe()

    async def _heal(self, args: dict, conn) -> dict:
        if self.isolated or self.delay_ms:
            log.info("healed: no isolation, no latency")
        self.isolated, self.delay_ms = False, 0
        return self.describe()

    async def _delay(self, args: dict, conn) -> dict:
        self.delay_ms = max(0, int(args["delay_ms"]))
        log.info("%d ms of latency on everything this controller sends", self.delay_ms)
        return self.describe()

    async def _describe(self, args: dict, conn) -> dict:
        return self.describe()

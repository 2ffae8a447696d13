"""Sees a node's process exit the moment it happens, when the node runs beside the controller.

A node that registers from the same process table (same kernel boot, same pid namespace) is
watched through a pidfd, which becomes readable when the process exits. So a crash is noticed
at once whoever started the node (`kraftwerk up --detach`, a user's shell, a test), instead of
after the heartbeat timeout.
"""
from __future__ import annotations

import asyncio
import logging
import os
import select
from typing import Awaitable, Callable

log = logging.getLogger(__name__)

OnExit = Callable[[int, str], Awaitable[object]]


class ProcessWatch:
    def __init__(self, on_exit: OnExit):
        self._on_exit = on_exit
        self._pidfds: dict[int, int] = {}  # node id -> pidfd of its current incarnation
        self._tasks: set[asyncio.Task] = set()

    def watch(self, node_id: int, incarnation_id: str, pid: int) -> None:
        self.forget(node_id)
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:  # it exited between registering and now
            self._exited(node_id, incarnation_id)
            return
        except (OSError, AttributeError) as exc:  # no pidfds on this kernel
            log.info("not watching node %d (pid %d): %s", node_id, pid, exc)
            return
        self._pidfds[node_id] = pidfd
        asyncio.get_running_loop().add_reader(pidfd, self._exited, node_id, incarnation_id)

    def _exited(self, node_id: int, incarnation_id: str) -> None:
        self.forget(node_id)
        task = asyncio.get_running_loop().create_task(self._on_exit(node_id, incarnation_id))
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("fencing an exited node failed: %s", task.exception())

    def has_exited(self, node_id: int) -> bool:
        """True if the watched process of node_id has exited, even before the watch has acted on it."""
        pidfd = self._pidfds.get(node_id)
        return pidfd is not None and bool(select.select([pidfd], [], [], 0)[0])

    def forget(self, node_id: int) -> None:
        pidfd = self._pidfds.pop(node_id, None)
        if pidfd is not None:
            asyncio.get_running_loop().remove_reader(pidfd)
            os.close(pidfd)

    def close(self) -> None:
        for node_id in list(self._pidfds):
            self.forget(node_id)
        for task in self._tasks:
            task.cancel()

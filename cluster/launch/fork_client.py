"""The launcher's end of a fork server (cluster/launch/fork_server.py, which says how it works):
start one, ask it for a process, let it go.

The server runs as `python -m cluster.launch.fork_server` and is imported by nothing, so that
the package (which imports this module) never holds a copy of the module being run.
"""
from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
from pathlib import Path

SERVER_MODULE = "cluster.launch.fork_server"  # run as `python -m`; nothing imports it
MAX_PACKET_BYTES = 1 << 20
ANSWER_TIMEOUT_S = 60  # covers the server's own start-up: its imports, on a busy machine


class ForkServerError(Exception):
    """The fork server could not be started or did not answer."""


class ForkedProcess:
    """The launcher's handle on a process the fork server started: its pid and the read end of its
    stdout. It is the fork server's child, not ours: its exit is watched by pid."""

    def __init__(self, pid: int, stdout):
        self.pid = pid
        self.stdout = stdout


class ForkServer:
    """The launcher's end of a fork server process."""

    def __init__(self, process: subprocess.Popen, channel: socket.socket, log_path: Path):
        self.process = process
        self.channel = channel
        self.log_path = log_path

    @classmethod
    def start(cls, programs: list[str], log_path: Path, process_group: int) -> "ForkServer":
        """A new fork server in process_group (0: its own, until it forks a group leader) for programs,
        in the order they will first be asked for."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with open(log_path, "ab") as log_file:
                process = subprocess.Popen(
                    [sys.executable, "-m", SERVER_MODULE, str(theirs.fileno()), *programs],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log_file,
                    pass_fds=[theirs.fileno()], process_group=process_group, env=same_code_environment())
        finally:
            theirs.close()
        return cls(process, ours, log_path)

    def alive(self) -> bool:
        return self.process.poll() is None

    def spawn(self, program: str, argv: list[str], log_path: Path, lead_group: bool = False) -> ForkedProcess:
        """Fork `python -m <program>` with argv, its stderr appended to log_path; returns once it has a pid."""
        read_end, write_end = os.pipe()
        try:
            with open(log_path, "ab") as log_file:
                request = {"program": program, "argv": argv, "lead_group": lead_group}
                self._send(json.dumps(request).encode(), [write_end, log_file.fileno()])
            pid = self._answer()["pid"]
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)  # the child's copy is the only writer left: EOF once it exits
        return ForkedProcess(pid, os.fdopen(read_end, "rb"))

    def _send(self, request: bytes, fds: list[int]) -> None:
        try:
            socket.send_fds(self.channel, [request], fds)
        except OSError as exc:
            raise ForkServerError(f"the fork server is gone ({exc}; its log: {self.log_path})") from None

    def _answer(self) -> dict:
        ready, _, _ = select.select([self.channel], [], [], ANSWER_TIMEOUT_S)
        try:
            answer = self.channel.recv(MAX_PACKET_BYTES) if ready else b""
        except ConnectionResetError:  # it exited with our request unread
            answer = b""
        if not answer:
            lines = self.log_path.read_text(errors="replace").strip().splitlines() if self.log_path.exists() else []
            last = f": {lines[-1].strip()}" if lines else ""
            raise ForkServerError(f"the fork server did not answer{last} (its log: {self.log_path})")
        return json.loads(answer)

    def close(self) -> None:
        """Let the server exit, as it does once its channel closes; what it forked runs on."""
        self.channel.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def same_code_environment() -> dict[str, str]:
    """The environment that makes the fork server (and what it forks) import this very kraftwerk:
    `python -m` would otherwise put the working directory first on the path, where another
    checkout may be."""
    root = str(Path(__file__).resolve().parents[2])  # the checkout, above cluster/
    path = os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "PYTHONPATH": path, "PYTHONSAFEPATH": "1", "PYTHONUNBUFFERED": "1", **bytecode_cache()}


def bytecode_cache() -> dict[str, str]:
    """Where PYTHONDONTWRITEBYTECODE is set, the settings that keep compiled modules in a cache of
    their own, outside the source tree, rather than compile them from source at every start."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return {}
    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(cache_home / "kraftwerk" / "pycache")}

"""Start node processes by forking one that has already imported the node's code.

Importing a node's modules (kafka-python's protocol classes above all) takes a fresh Python
about a quarter of a second of CPU, which on a small machine made a 9-node start wait seconds
for nine processes doing the same imports. The launcher instead starts one fork server per
cluster, `python -m cluster.fork_server`, at the same time as the controller: it imports the
node program once and then forks a process for each node asked for. A forked node runs
`node.__main__.main` exactly as `python -m node` would, with its own pid, stdout (the pipe the
launcher reads its ready line from) and stderr (its log file), both handed over with the request.

The launcher talks to the server over a Unix socket of sequenced packets: a request is one
JSON packet `{"argv"}` carrying two descriptors (stdout, stderr); the answer is `{"pid"}`. The
server runs in the cluster's process group, so the nodes it forks do too. It exits when the
launcher closes its end, so a cluster started with `kraftwerk up --detach` keeps running
without it; the nodes never depend on it.
"""
from __future__ import annotations

import gc
import json
import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

MAX_PACKET_BYTES = 1 << 20
ANSWER_TIMEOUT_S = 60  # covers the server's own start-up: its imports, on a busy machine


class ForkServerError(Exception):
    """The fork server could not be started or did not answer."""


class ForkedNode:
    """The launcher's handle on a node the fork server started: its pid and the read end of its stdout.

    The node is the fork server's child, not ours: its exit is watched by pid."""

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
    def start(cls, log_path: Path, process_group: int) -> "ForkServer":
        """A new fork server in process_group; it answers once it has imported the node's code."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with open(log_path, "ab") as log_file:
                process = subprocess.Popen(
                    [sys.executable, "-m", "cluster.fork_server", str(theirs.fileno())],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log_file,
                    pass_fds=[theirs.fileno()], process_group=process_group,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
        finally:
            theirs.close()
        return cls(process, ours, log_path)

    def alive(self) -> bool:
        return self.process.poll() is None

    def spawn(self, argv: list[str], log_path: Path) -> ForkedNode:
        """Fork a node with argv (as `python -m node` takes them), its stderr appended to log_path;
        returns once it has a pid."""
        read_end, write_end = os.pipe()
        try:
            with open(log_path, "ab") as log_file:
                self._send(json.dumps({"argv": argv}).encode(), [write_end, log_file.fileno()])
            pid = self._answer()["pid"]
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)  # the node's copy is the only writer left: EOF once it exits
        return ForkedNode(pid, os.fdopen(read_end, "rb"))

    def _send(self, request: bytes, fds: list[int]) -> None:
        try:
            socket.send_fds(self.channel, [request], fds)
        except OSError as exc:
            raise ForkServerError(f"the fork server is gone ({exc}; its log: {self.log_path})") from None

    def _answer(self) -> dict:
        ready, _, _ = select.select([self.channel], [], [], ANSWER_TIMEOUT_S)
        answer = self.channel.recv(MAX_PACKET_BYTES) if ready else b""
        if not answer:
            lines = self.log_path.read_text(errors="replace").strip().splitlines() if self.log_path.exists() else []
            last = f": {lines[-1].strip()}" if lines else ""
            raise ForkServerError(f"the fork server did not answer{last} (its log: {self.log_path})")
        return json.loads(answer)

    def close(self) -> None:
        """Let the server exit, as it does once its channel closes; the nodes it forked run on."""
        self.channel.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# --- the server process ---

def serve(channel: socket.socket) -> list[str] | None:
    """Fork a node per request until the launcher hangs up. Returns only in a forked node, with its
    argv, its stdout and stderr in place; the server itself gets None once the channel closes."""
    while True:
        message, fds, _, _ = socket.recv_fds(channel, MAX_PACKET_BYTES, 2)
        if not message:
            return None
        argv = json.loads(message)["argv"]
        pid = os.fork()
        if pid == 0:
            channel.close()
            become_node(argv, *fds)
            return argv
        for fd in fds:
            os.close(fd)
        channel.send(json.dumps({"pid": pid}).encode())


def become_node(argv: list[str], stdout_fd: int, stderr_fd: int) -> None:
    """What a fresh `python -m node` would have: default SIGCHLD, stdin /dev/null, its own stdout and stderr."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((devnull, 0), (stdout_fd, 1), (stderr_fd, 2)):
        os.dup2(fd, target)
        os.close(fd)
    sys.argv = ["-m node", *argv]


def main(channel_fd: int) -> None:
    import concurrent.futures.thread  # noqa: F401 (a node's first executor job would import it)

    from node.__main__ import main as node_main

    # The kernel reaps the forked nodes: nothing here waits for them, and none stays a zombie.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    # What is imported lives as long as every node: keep the collector from touching (and so
    # copying) its pages in each of them.
    gc.collect()
    gc.freeze()
    argv = serve(socket.socket(fileno=channel_fd))
    if argv is not None:
        node_main(argv)  # exits the process, as `python -m node` does


if __name__ == "__main__":
    main(int(sys.argv[1]))

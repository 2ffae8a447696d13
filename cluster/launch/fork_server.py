"""Start the controller and node processes by forking one that has already imported their code.

Importing a node's modules (kafka-python's protocol classes above all) is most of what a fresh
Python spends before it serves, and on a small machine N processes doing the same imports wait
for one another. The launcher instead starts one fork server per cluster,
`python -m cluster.launch.fork_server`, which imports each program once and forks a process for
each one asked for. A forked process runs the program's own `main` exactly as
`python -m controller` / `python -m node` would, with its own pid, stdout (the pipe the
launcher reads its ready line from) and stderr (its log file), both handed over with the request.

The launcher talks to the server (cluster/launch/fork_client.py is its end) over a Unix socket
of sequenced packets: a request is one JSON packet `{"program", "argv", "lead_group"}` carrying
two descriptors (stdout, stderr); the answer is `{"pid"}`. A program is imported when first
asked for and the other programs listed on the server's command line right after that first
fork, so the controller starts while the node's code is imported (unless another request comes
right after a fork: a quorum's controllers are forked one after another before the node's code is
imported). The process asked for with
`lead_group` (the controller) leads a new process group, and the server joins it: every process
forked after lands in the group that stopping a cluster kills. The server exits when the
launcher closes its end, so a cluster started with `kraftwerk up --detach` keeps running without
it; nothing it forked depends on it.

Start-up is mostly these imports, so the server makes them cheap. Neither program uses
kafka-python's clients, only its protocol and record modules: the `kafka` package's __init__
(which imports the admin client, consumer and producer) stays unrun until
something takes a name from the package itself. The collector is off while it imports (see
main). And where PYTHONDONTWRITEBYTECODE is set, which would make every start compile all of
kraftwerk from source again, the server and what it forks keep
bytecode under `~/.cache/kraftwerk/pycache` (`$XDG_CACHE_HOME` is honoured), outside the source
tree, unless PYTHONPYCACHEPREFIX names a place already.
"""
from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import os
import select
import signal
import socket
import sys

from cluster.launch.fork_client import MAX_PACKET_BYTES

PROGRAM_MODULES = {"controller": "controller.__main__", "node": "node.__main__"}
# How long the server waits, after a fork, for a request that follows at once before it imports more.
NEXT_REQUEST_WAIT_S = 0.005


def defer_kafka_package_init() -> None:
    """Make `kafka` a package whose submodules import as usual but whose own __init__ (all of
    kafka-python's clients) runs only when a name is first taken from the package itself."""
    spec = importlib.util.find_spec("kafka")
    if "kafka" in sys.modules or spec is None or spec.loader is None:
        return
    package = importlib.util.module_from_spec(spec)

    def __getattr__(name: str):
        if importlib.util.find_spec(f"kafka.{name}") is not None:  # `from kafka import codec`
            return importlib.import_module(f"kafka.{name}")
        del package.__getattr__  # from now on the package answers as an imported one does
        spec.loader.exec_module(package)
        return getattr(package, name)

    package.__getattr__ = __getattr__
    sys.modules["kafka"] = package


def load(program: str) -> None:
    """Import the program into this process, and so into every child forked after."""
    if PROGRAM_MODULES[program] in sys.modules:
        return
    importlib.import_module(PROGRAM_MODULES[program])
    # What is imported lives as long as every child: keep the collector from touching (and so
    # copying) its pages in each of them. The collector is off in this process (see main), so
    # there is no garbage to collect first worth the time that pass would take.
    gc.freeze()


def serve(channel: socket.socket, programs: list[str]) -> dict | None:
    """Fork a process per request until the launcher hangs up. Returns only in a forked child, with
    its request, its stdout and stderr in place; the server itself gets None once the channel closes."""
    while True:
        message, fds, _, _ = socket.recv_fds(channel, MAX_PACKET_BYTES, 2)
        if not message:
            return None
        request = json.loads(message)
        load(request["program"])
        pid = os.fork()
        if pid == 0:
            channel.close()
            become_child(request, *fds)
            return request
        for fd in fds:
            os.close(fd)
        if request["lead_group"]:
            join_group_of(pid)
        channel.send(json.dumps({"pid": pid}).encode())
        for program in programs:  # while that child starts, unless another request follows it at once
            if select.select([channel], [], [], NEXT_REQUEST_WAIT_S)[0]:
                break
            load(program)


def join_group_of(pid: int) -> None:
    """Make the new process pid lead a process group, and join it."""
    try:
        os.setpgid(pid, pid)  # also here, not only in the child: this process joins that group next
        os.setpgid(0, pid)
    except (ProcessLookupError, PermissionError):
        pass  # it exited already: the launcher learns so from its stdout


def become_child(request: dict, stdout_fd: int, stderr_fd: int) -> None:
    """What a fresh `python -m <program>` would have: default SIGCHLD, stdin /dev/null, its own stdout
    and stderr."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    gc.enable()
    if request["lead_group"]:
        os.setpgid(0, 0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((devnull, 0), (stdout_fd, 1), (stderr_fd, 2)):
        os.dup2(fd, target)
        os.close(fd)
    sys.argv = [f"-m {request['program']}", *request["argv"]]


def main(channel_fd: int, programs: list[str]) -> None:
    # Imported once here rather than in every process: a node's first executor job imports the
    # one, naming its listener's host (asyncio encodes it as IDNA) the other.
    import concurrent.futures.thread  # noqa: F401
    import encodings.idna  # noqa: F401

    # The kernel reaps the forked processes: nothing here waits for them, and none stays a zombie.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    # Imports make long-lived objects only: collecting while they run is wasted time, and leaves
    # holes in pages every child would then copy (the recipe of the gc module's freeze()).
    gc.disable()
    defer_kafka_package_init()
    request = serve(socket.socket(fileno=channel_fd), programs)
    if request is not None:
        # Exits the process, as `python -m <program>` does.
        sys.exit(sys.modules[PROGRAM_MODULES[request["program"]]].main(request["argv"]))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])

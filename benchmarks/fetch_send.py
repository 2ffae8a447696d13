"""What one Fetch answer's records cost the sending node, read into memory or sent with sendfile:
`python -m benchmarks.fetch_send`.

For each size, a segment holds 8 batches of one value of that size; the node's own code reads
one (`PartitionLog.read`, with and without `region_from`) and writes it after a 4-byte head
(`node.socket_writes.write_pieces`) on a uvloop stream over TCP loopback, which a thread of
this process drains. Printed: the event loop thread's CPU (user + kernel) and wall time per
answer, each the mean over the rounds. The node's `SENDFILE_FROM_BYTES` (node/apis/fetch.py)
rests on these figures: below it reading the records into memory costs the sending node less,
above it sendfile does.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import socket
import tempfile
import threading
import time

from cluster.formats.partition_log import LogConfig, PartitionLog
from cluster.formats.records import encode_batch
from cluster.runtime.event_loop import run
from node.socket_writes import write_pieces

BATCHES = 8


def _thread_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def _loopback_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        sender = socket.create_connection(listener.getsockname())
        receiver, _ = listener.accept()
    sender.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sender, receiver


def _drain(receiver: socket.socket) -> None:
    while receiver.recv(1 << 20):
        pass


async def _send_answers(sender: socket.socket, partition_log: PartitionLog, size: int, rounds: int,
                        region_from: int | None) -> tuple[float, float]:
    _, writer = await asyncio.open_connection(sock=sender)
    try:
        async def answer(i: int) -> None:
            records = partition_log.read(i % BATCHES, size + 1000, region_from=region_from).records
            await write_pieces(writer, [b"head", records])

        for i in range(min(rounds, 50)):  # warm-up
            await answer(i)
        cpu, wall = _thread_cpu_s(), time.perf_counter()
        for i in range(rounds):
            await answer(i)
        return (_thread_cpu_s() - cpu) / rounds, (time.perf_counter() - wall) / rounds
    finally:
        writer.close()


def cost_per_answer(size: int, rounds: int, sendfile: bool) -> tuple[float, float]:
    """(CPU seconds, wall seconds) per answer of `size` bytes of records."""
    directory = tempfile.mkdtemp(prefix="kraftwerk-bench-send-")
    sender, receiver = _loopback_pair()
    drainer = threading.Thread(target=_drain, args=(receiver,), daemon=True)
    try:
        partition_log = PartitionLog(os.path.join(directory, "bench-0"), config=LogConfig(segment_bytes=1 << 30))
        for i in range(BATCHES):
            partition_log.append(encode_batch([(None, os.urandom(size))], timestamp=1_000 + i), leader_epoch=0)
        drainer.start()
        return run(_send_answers(sender, partition_log, size, rounds, 1 if sendfile else None))
    finally:
        sender.close()
        drainer.join(10)
        receiver.close()
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fetch_send", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-kib", type=int, nargs="+", default=[32, 64, 128, 192, 256, 512, 1024, 4096])
    parser.add_argument("--bytes-per-size", type=int, default=64 << 20,
                        help="how much each way sends per size (at least 200 answers)")
    args = parser.parse_args()
    print("per Fetch answer, on the event loop thread   in memory (CPU / wall)   sendfile (CPU / wall)")
    for kib in args.sizes_kib:
        size = kib << 10
        rounds = max(200, args.bytes_per_size // size)
        in_memory = cost_per_answer(size, rounds, sendfile=False)
        by_sendfile = cost_per_answer(size, rounds, sendfile=True)
        print(f" {kib:>6} KiB of records, {rounds:>5} answers        "
              f"{in_memory[0] * 1e6:7.1f} / {in_memory[1] * 1e6:7.1f} us     "
              f"{by_sendfile[0] * 1e6:7.1f} / {by_sendfile[1] * 1e6:7.1f} us", flush=True)


if __name__ == "__main__":
    main()

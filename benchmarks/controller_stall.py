"""How long large admin operations hold the controller's event loop: `python -m benchmarks.controller_stall`.

Runs a controller in this process on a temporary metadata log with three live brokers, then
creates a topic of --partitions partitions, grows another by as many, and deletes both, while
a probe task measures how late the event loop runs it (it asks to wake every millisecond).
Prints the longest stall and the time each operation took; figures, not pass/fail. Full passes
of Python's cyclic GC over every object the process holds are part of the stalls.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import time
import uuid
from pathlib import Path

from cluster.formats.topic_ids import topic_id_to_kafka_string
from cluster.runtime.stall_probe import StallProbe
from controller.metadata_writer import MetadataWriter
from controller.server import Controller


async def live_controller(data_dir: Path) -> Controller:
    controller = Controller(MetadataWriter(data_dir, "stall-bench"), {"num.partitions": 1,
                                                                     "default.replication.factor": 1}, 60_000)
    controller.take_over()
    ops = controller.handlers()
    for node_id in (1, 2, 3):
        reply = await ops["register"]({"node_id": node_id, "incarnation_id": topic_id_to_kafka_string(uuid.uuid4()),
                                       "host": "127.0.0.1", "port": 9000 + node_id}, None)
        await ops["heartbeat"]({"node_id": node_id, "broker_epoch": reply["broker_epoch"],
                                "applied_offset": 1 << 40}, None)
    return controller


async def measure(op, args: dict, probe: StallProbe) -> tuple[float, tuple[float, float], dict]:
    probe.start()
    started = time.perf_counter()
    reply = await op(args, None)
    took = time.perf_counter() - started
    return took, await probe.stop(), reply


async def run(partitions: int) -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        controller = await live_controller(Path(data_dir))
        gc.collect()
        gc.freeze()  # as `python -m controller` does once it has replayed its log
        ops, probe = controller.handlers(), StallProbe()
        steps = [
            (f"create a topic of {partitions} partitions x 3 replicas", "create_topics", {"topics": [
                {"name": "big", "num_partitions": partitions, "replication_factor": 3}]}),
            ("create a 1-partition topic", "create_topics", {"topics": [
                {"name": "grown", "num_partitions": 1, "replication_factor": 3}]}),
            (f"grow it by {partitions - 1} partitions", "create_partitions", {"topics": [
                {"name": "grown", "count": partitions}]}),
            ("fence a broker leading a third of them", "controlled_shutdown", {"node_id": 2, "broker_epoch": None}),
            ("status of every partition", "status", {}),
            ("delete both topics", "delete_topics", {"topics": [{"name": "big"}, {"name": "grown"}]}),
        ]
        for label, op, args in steps:
            if op == "controlled_shutdown":
                args["broker_epoch"] = controller.sessions[2].broker_epoch
            took, (stall, cpu_stall), reply = await measure(ops[op], args, probe)
            errors = [r["error_code"] for r in reply.get("results", []) if r.get("error_code")]
            print(f"{label:<42} {took * 1000:7.1f} ms; longest event-loop stall {stall * 1000:6.2f} ms "
                  f"({cpu_stall * 1000:5.2f} ms of CPU)" + (f"  (errors {errors})" if errors else ""))
        controller.writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.controller_stall", description=__doc__)
    parser.add_argument("--partitions", type=int, default=5000)
    asyncio.run(run(parser.parse_args().partitions))


if __name__ == "__main__":
    main()

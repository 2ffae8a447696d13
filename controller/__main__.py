"""Run the controller: `python -m controller --data-dir DIR [--port 0]`.

Prints one JSON line `{"ready": true, "port": ..., "pid": ...}` once it serves. A node whose
server.properties has `process.roles=broker,controller` (or `controller`) starts it with the
values of that file; `--exit-with-parent PID` makes it end with that node, whatever ends it.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import ctypes
import gc
import json
import logging
import os
import signal
import sys
import uuid
from pathlib import Path

from cluster.formats.config import BrokerConfig
from cluster.formats.control import ControlServer
from cluster.runtime import event_loop
from cluster.runtime.tls import control_channel_tls
from cluster.runtime.shutdown import cancel_and_wait, cancel_remaining_tasks
from cluster.formats.metadata_log import read_meta_properties, write_meta_properties
from cluster.formats.topic_ids import topic_id_from_kafka_string
from controller.bootstrap_records import BadScramArgument, first_records, parse_add_scram
from controller.metadata_writer import MetadataWriter
from controller.quorum_status import Voter
from controller.server import Controller

log = logging.getLogger("controller")
PR_SET_PDEATHSIG = 1


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m controller", description="Run the kraftwerk controller.")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cluster-id")
    parser.add_argument("--node-id", type=int, default=0, help="node.id for a log dir this controller formats")
    parser.add_argument("--exit-with-parent", type=int, metavar="PID",
                        help="stop when process PID (the node that started this controller) exits")
    parser.add_argument("--heartbeat-timeout-ms", type=int, default=2000)
    parser.add_argument("--num-partitions", type=int, default=1)
    parser.add_argument("--default-replication-factor", type=int, default=1)
    parser.add_argument("--add-scram", action="append", default=[], metavar="MECHANISM=[name=N,password=P]",
                        help="a SCRAM credential a new metadata log starts with, as kafka-storage.sh format adds it")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker config by Kafka's name (the controller reads auto.leader.rebalance.enable, "
                             "leader.imbalance.check.interval.seconds and the controller listener's TLS "
                             "settings; others are ignored)")
    return parser.parse_args(argv)


def config_from(settings: list[str]) -> BrokerConfig:
    values = {}
    for item in settings:
        key, _, value = item.partition("=")
        values[key.strip()] = value.strip()
    return BrokerConfig(values)


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def load_cluster_id(data_dir: Path, requested: str | None, node_id: int) -> str:
    """The cluster id of a log dir's meta.properties (as `kafka-storage.sh format` writes it); a
    directory without one is formatted here, with a new cluster id unless one was asked for."""
    props = read_meta_properties(data_dir)
    if props.get("cluster.id"):
        if requested and requested != props["cluster.id"]:
            raise SystemExit(f"{data_dir} belongs to cluster {props['cluster.id']}, not {requested}")
        return props["cluster.id"]
    cluster_id = requested or new_cluster_id()
    log.info("formatting %s for cluster %s", data_dir, cluster_id)
    write_meta_properties(data_dir, {"cluster.id": cluster_id, "node.id": str(node_id), "version": "1",
                                     "directory.id": new_cluster_id()})
    return cluster_id


def _directory_id(data_dir: Path) -> uuid.UUID:
    """The log dir's directory.id (meta.properties), as Kafka names a voter's replica directory."""
    try:
        return topic_id_from_kafka_string(read_meta_properties(data_dir)["directory.id"])
    except (KeyError, ValueError):  # a log dir formatted before directory ids: Kafka's "no directory"
        return uuid.UUID(int=0)


def exit_with_parent(parent_pid: int) -> None:
    """Have the kernel send SIGTERM when the parent exits (even by SIGKILL); exit now if it already has."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent_pid:
        raise SystemExit(f"the node that started this controller (pid {parent_pid}) has exited")


async def run(args) -> None:
    if args.exit_with_parent:
        exit_with_parent(args.exit_with_parent)
    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    writer = MetadataWriter(data_dir, load_cluster_id(data_dir, args.cluster_id, args.node_id))
    if "metadata.version" not in writer.image.features:
        async with writer.exclusive:
            await writer.append(first_records(args.add_scram))
    # The replayed image lives as long as the process: keep it out of every later full GC pass,
    # which would otherwise walk all of it and stall the event loop.
    gc.collect()
    gc.freeze()
    config = config_from(args.set)
    controller = Controller(writer, {"num.partitions": args.num_partitions,
                                     "default.replication.factor": args.default_replication_factor},
                            args.heartbeat_timeout_ms, config)
    server = ControlServer(controller.handlers())
    tls = control_channel_tls(config)
    port = await server.start(args.host, args.port, tls=tls.server if tls else None)
    controller.voter = Voter(args.node_id, _directory_id(data_dir), ("CONTROLLER", args.host, port))
    fencing = asyncio.create_task(controller.fence_silent_brokers())
    balancing = asyncio.create_task(controller.balance_leaders())
    print(json.dumps({"ready": True, "port": port, "pid": os.getpid()}), flush=True)
    log.info("controller of cluster %s serving on %s:%d%s", writer.image.cluster_id, args.host, port,
             " (mutual TLS)" if tls else "")
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await cancel_and_wait([fencing, balancing])
    controller.process_watch.close()
    await server.close()
    await cancel_remaining_tasks()
    writer.close()
    log.info("controller stopped")


def main(argv=None) -> None:
    logging.basicConfig(level=os.environ.get("KRAFTWERK_LOG_LEVEL", "INFO"), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        for value in args.add_scram:
            parse_add_scram(value)
    except BadScramArgument as exc:
        raise SystemExit(f"cannot start: {exc}") from None
    event_loop.run(run(args))


if __name__ == "__main__":
    main()

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
from controller.bootstrap_records import BadScramArgument, parse_add_scram
from controller.metadata_writer import MetadataWriter
from controller.quorum import raft_config
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
    parser.add_argument("--voters", metavar="ID@HOST:PORT,...",
                        help="every controller of the quorum, this one included, as controller.quorum.voters "
                             "names them (default: this controller alone)")
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


def parse_voters(spec: str | None, node_id: int) -> dict[int, tuple[str, int]] | None:
    """controller.quorum.voters' syntax: id@host:port, comma-separated; this controller among them."""
    if not spec:
        return None
    voters = {}
    for item in (part.strip() for part in spec.split(",") if part.strip()):
        voter_id, at, address = item.partition("@")
        host, _, port = address.rpartition(":")
        if not at or not voter_id.isdigit() or not port.isdigit() or not host:
            raise SystemExit(f"cannot start: --voters: {item!r} is not id@host:port")
        voters[int(voter_id)] = (host.strip("[]"), int(port))
    if node_id not in voters:
        raise SystemExit(f"cannot start: --voters names {sorted(voters)}, not this controller's id {node_id}")
    return voters


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
    config = config_from(args.set)
    tls = control_channel_tls(config)
    voters = parse_voters(args.voters, args.node_id)
    port = voters[args.node_id][1] if voters and not args.port else args.port
    writer = MetadataWriter(data_dir, load_cluster_id(data_dir, args.cluster_id, args.node_id), args.node_id,
                            voters, raft_config(config), tls.client if tls else None)
    # The replayed image lives as long as the process: keep it out of every later full GC pass,
    # which would otherwise walk all of it and stall the event loop.
    gc.collect()
    gc.freeze()
    controller = Controller(writer, {"num.partitions": args.num_partitions,
                                     "default.replication.factor": args.default_replication_factor},
                            args.heartbeat_timeout_ms, config, bootstrap_scram=args.add_scram)
    server = ControlServer({**controller.handlers(), "raft": writer.quorum.handle})
    port = await server.start(args.host, port, tls=tls.server if tls else None)
    controller.voter = Voter(args.node_id, _directory_id(data_dir), ("CONTROLLER", args.host, port))
    await writer.start()
    following = asyncio.create_task(controller.activation.follow_quorum())
    if voters is None:  # alone, it leads at once: serve nodes only once the cluster's first records are in
        await writer.wait_for(lambda: controller.active and "metadata.version" in writer.image.features, 30)
    fencing = asyncio.create_task(controller.fence_silent_brokers())
    balancing = asyncio.create_task(controller.balance_leaders())
    print(json.dumps({"ready": True, "port": port, "pid": os.getpid()}), flush=True)
    log.info("controller %d of cluster %s serving on %s:%d%s%s", args.node_id, writer.image.cluster_id, args.host,
             port, " (mutual TLS)" if tls else "", f", one of voters {sorted(voters)}" if voters else "")
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await cancel_and_wait([fencing, balancing, following])
    controller.process_watch.close()
    await server.close()
    await writer.stop()
    await cancel_remaining_tasks()
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

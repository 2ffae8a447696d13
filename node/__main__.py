"""Run one broker node: `python -m node [server.properties] [--node-id N --data-dir D --port P ...]`.

Reads Kafka's own property names; command-line flags override the file. Once the Kafka
listener is bound and the node has registered with the controller it prints one JSON line
`{"ready": true, "port": ..., "admin_port": ..., "pid": ..., "incarnation_id": ...}` to stdout
(the launcher waits for it; the admin port takes fault injection and replica-state queries).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys

from cluster.config import ADMIN_PORT_CONFIG, BrokerConfig, load_properties
from cluster.shutdown import cancel_and_wait, cancel_remaining_tasks
from node.admin import AdminServer
from node.broker import Broker, Listener
from node.server import KafkaServer

log = logging.getLogger("node")


def parse_args(argv: list[str]) -> BrokerConfig:
    parser = argparse.ArgumentParser(prog="python -m node", description="Run a kraftwerk broker node.")
    parser.add_argument("properties", nargs="?", help="a Kafka server.properties file")
    parser.add_argument("--node-id", type=int)
    parser.add_argument("--data-dir", help="the node's log dir (log.dirs)")
    parser.add_argument("--host", default=None, help="listener host (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="listener port; 0 picks a free one")
    parser.add_argument("--controller", help="controller host:port")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any broker config by Kafka's name, e.g. num.partitions=3")
    args = parser.parse_args(argv)
    values = load_properties(args.properties) if args.properties else {}
    if args.node_id is not None:
        values["node.id"] = str(args.node_id)
    if args.data_dir:
        values["log.dirs"] = args.data_dir
    if args.host is not None or args.port is not None:
        values["listeners"] = f"PLAINTEXT://{args.host or '127.0.0.1'}:{args.port or 0}"
    if args.controller:
        values["controller.address"] = args.controller
    for item in args.set:
        key, _, value = item.partition("=")
        values[key.strip()] = value.strip()
    return BrokerConfig(values)


async def run(config: BrokerConfig) -> None:
    broker = Broker(config)
    server = KafkaServer(broker, config.get_int("socket.request.max.bytes"))
    _, host, port = config.listener()
    bound_port = await server.start(host, port)
    name, advertised_host, advertised_port = config.advertised_listener(bound_port)
    await broker.start(Listener(name, advertised_host, advertised_port))
    admin = AdminServer(broker)
    admin_port = await admin.start(host, int(config.get(ADMIN_PORT_CONFIG) or 0))
    print(json.dumps({"ready": True, "port": bound_port, "admin_port": admin_port, "pid": os.getpid(),
                      "incarnation_id": str(broker.incarnation_id)}), flush=True)
    log.info("node %d serving on %s:%d", broker.node_id, host, bound_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    retention = asyncio.create_task(broker.replicas.run_retention(config.get_int("log.retention.check.interval.ms")))
    isr_expiration = asyncio.create_task(broker.replicas.run_isr_expiration())
    checkpoints = asyncio.create_task(broker.replicas.run_high_watermark_checkpoints(
        config.get_int("replica.high.watermark.checkpoint.interval.ms")))
    offset_expiry = asyncio.create_task(broker.groups.run_offset_expiry(
        config.get_int("offsets.retention.check.interval.ms"), config.get_int("offsets.retention.minutes") * 60_000))
    await stop.wait()
    log.info("node %d shutting down", broker.node_id)
    await broker.metadata.controlled_shutdown()
    await cancel_and_wait([retention, isr_expiration, checkpoints, offset_expiry])
    await server.close()
    await admin.close()
    await broker.close()
    await cancel_remaining_tasks()
    log.info("node %d stopped", broker.node_id)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=os.environ.get("KRAFTWERK_LOG_LEVEL", "INFO"), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(run(parse_args(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    main()

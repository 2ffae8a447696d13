"""Run one broker node: `python -m node [server.properties] [--node-id N --data-dir D --port P ...]`.

Reads Kafka's own property names; command-line flags override the file. Once the Kafka
listener is bound and the node has registered with the controller it prints one JSON line
`{"ready": true, "port": ..., "admin_port": ..., "pid": ..., "incarnation_id": ...}` to stdout
(the launcher waits for it; the admin port takes fault injection and replica-state queries).

`process.roles` is honoured as Kafka does: `broker,controller` (Kafka's quickstart) also runs a
controller on the CONTROLLER listener, serving the log dir's `__cluster_metadata`; `controller`
alone makes this process a controller. The controller runs as a child process rather than in
this event loop, for three reasons: `node` and `controller` stay separate programs as the
layout wants; the broker's produce and fetch work never delays heartbeats and admin requests
(each has its own interpreter and event loop, and the machine's cores); and it is the same
controller program a cluster runs. It cannot outlive the node (the kernel sends it SIGTERM
when the node exits, SIGKILL included), and if it exits first the node logs it at ERROR and
stops too, as a Kafka process whose controller fails does.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys

from cluster.formats.config import ADMIN_PORT_CONFIG, BrokerConfig, ConfigError, load_properties, parse_listener
from cluster.formats.listeners import advertised_listeners, broker_listeners, inter_broker_listener_name
from cluster.runtime import event_loop
from cluster.runtime.shutdown import cancel_and_wait, cancel_remaining_tasks
from node.admin import AdminServer
from node.broker import Broker
from node.security.peer_links import PeerLinks
from node.server import KafkaServer

log = logging.getLogger("node")


def parse_args(argv: list[str]) -> BrokerConfig:
    parser = argparse.ArgumentParser(prog="python -m node", description="Run a kraftwerk broker node.")
    parser.add_argument("properties", nargs="?", help="a Kafka server.properties file")
    parser.add_argument("--node-id", type=int)
    parser.add_argument("--data-dir", help="the node's log dir (log.dirs)")
    parser.add_argument("--host", default=None, help="listener host (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="listener port; 0 picks a free one")
    parser.add_argument("--controller", metavar="HOST:PORT[,HOST:PORT...]",
                        help="the controller, or every controller of a quorum (the node follows the active one)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any broker config by Kafka's name, e.g. num.partitions=3")
    args = parser.parse_args(argv)
    values = load_properties(args.properties) if args.properties else {}
    if args.node_id is not None:
        values["node.id"] = str(args.node_id)
    if args.data_dir:
        values["log.dirs"] = args.data_dir
    if args.controller:
        values["controller.address"] = args.controller
    for item in args.set:
        key, _, value = item.partition("=")
        values[key.strip()] = value.strip()
    if args.host is not None or args.port is not None:
        values["listeners"] = _first_listener_moved(values, args.host, args.port)
    return BrokerConfig(values)


def _first_listener_moved(values: dict, host: str | None, port: int | None) -> str:
    """`listeners` with the first listener for clients moved to --host/--port (its name and the
    other listeners kept): how a launcher gives each node a free port."""
    config = BrokerConfig(values)
    controller_names = {n.strip().upper() for n in config.get("controller.listener.names").split(",")}
    specs = [spec.strip() for spec in config.get("listeners").split(",") if spec.strip()]
    for index, spec in enumerate(specs):
        name, old_host, old_port = parse_listener(spec)
        if name.upper() not in controller_names:
            specs[index] = f"{name}://{host if host is not None else old_host or '127.0.0.1'}:" \
                           f"{port if port is not None else old_port}"
            return ",".join(specs)
    return ",".join([f"PLAINTEXT://{host or '127.0.0.1'}:{port or 0}", *specs])


# Broker configs a controller reads, passed on to a controller this node starts.
CONTROLLER_SETTINGS = ("auto.leader.rebalance.enable", "leader.imbalance.check.interval.seconds")
CONTROLLER_START_TIMEOUT_S = 60
CONTROLLER_STOP_TIMEOUT_S = 10


def controller_command(config: BrokerConfig, parent_pid: int | None = None) -> list[str]:
    """`python -m controller` with this node's settings, listening on its CONTROLLER listener."""
    _, host, port = config.controller_listener()
    command = [sys.executable, "-m", "controller", "--data-dir", str(config.metadata_log_dir), "--host", host,
               "--port", str(port), "--node-id", str(config.node_id),
               "--heartbeat-timeout-ms", config.get("broker.session.timeout.ms"),
               "--num-partitions", config.get("num.partitions"),
               "--default-replication-factor", config.get("default.replication.factor")]
    voters = config.quorum_voters()
    if len(voters) > 1:  # a voter of a quorum (process.roles=controller; check_roles refuses combined mode)
        command += ["--voters", ",".join(f"{voter_id}@{voter_host}:{voter_port}"
                                         for voter_id, voter_host, voter_port in voters)]
    settings = {key: config.get(key) for key in CONTROLLER_SETTINGS}
    settings.update(_control_channel_settings(config))
    command += [arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")]
    return command + (["--exit-with-parent", str(parent_pid)] if parent_pid else [])


def _control_channel_settings(config: BrokerConfig) -> dict[str, str]:
    """What secures the control channel (cluster.runtime.tls.control_channel_tls): the controller
    listener's protocol and its ssl.* settings, given for every listener or for it alone."""
    listener = config.get("controller.listener.names").split(",")[0].strip().lower()
    wanted = ("controller.listener.names", "listener.security.protocol.map")
    return {key: value for key, value in config.values.items()
            if key in wanted or key.startswith(("ssl.", f"listener.name.{listener}.ssl."))}


class LocalController:
    """The controller child of a `broker,controller` node."""

    def __init__(self, process: asyncio.subprocess.Process, port: int):
        self.process = process
        self.port = port
        self.stopping = False

    @classmethod
    async def start(cls, config: BrokerConfig) -> "LocalController":
        # Its own session: a Ctrl-C meant for the node must not stop the controller before the
        # node's controlled shutdown has moved its leaderships.
        process = await asyncio.create_subprocess_exec(
            *controller_command(config, os.getpid()), stdout=asyncio.subprocess.PIPE, start_new_session=True)
        try:
            line = await asyncio.wait_for(process.stdout.readline(), CONTROLLER_START_TIMEOUT_S)
        except asyncio.TimeoutError:
            line = b""
        if not line:
            if process.returncode is None:
                process.kill()
            raise SystemExit(f"the controller did not start (exit status {await process.wait()})")
        return cls(process, json.loads(line)["port"])

    async def watch(self, on_exit) -> None:
        status = await self.process.wait()
        if not self.stopping:
            log.error("the controller process (pid %d) exited with status %s: stopping this node",
                      self.process.pid, status)
            on_exit()

    async def stop(self) -> None:
        self.stopping = True
        if self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), CONTROLLER_STOP_TIMEOUT_S)
            except asyncio.TimeoutError:
                log.warning("the controller did not stop in %d s: killing it", CONTROLLER_STOP_TIMEOUT_S)
                self.process.kill()
                await self.process.wait()


async def run(config: BrokerConfig) -> int:
    """Serve until SIGTERM or SIGINT; the exit status (1 if this node's controller failed)."""
    stop, serving, failed = asyncio.Event(), asyncio.Event(), []
    controller = None
    if "controller" in config.process_roles:
        controller = await LocalController.start(config)
        _, host, _ = config.controller_listener()
        config.values["controller.address"] = f"{host if host not in ('', '0.0.0.0', '::') else '127.0.0.1'}:" \
                                              f"{controller.port}"
        main = asyncio.current_task()

        def controller_failed() -> None:
            failed.append(True)
            stop.set()
            if not serving.is_set():  # still starting: it would wait for its controller forever
                main.cancel()
        watch = asyncio.create_task(controller.watch(controller_failed))
    try:
        await serve(config, stop, serving)
    except asyncio.CancelledError:
        if not failed:
            raise
    finally:
        if controller:
            await controller.stop()
            watch.cancel()
    return 1 if failed else 0


async def serve(config: BrokerConfig, stop: asyncio.Event, serving: asyncio.Event) -> None:
    broker = Broker(config)
    server = KafkaServer(broker, config.get_int("socket.request.max.bytes"))
    listeners = broker_listeners(config)
    bound_ports = await server.start(listeners)
    await broker.start(advertised_listeners(config, bound_ports))
    admin = AdminServer(broker)
    host = listeners[0].host
    admin_port = await admin.start(host, int(config.get(ADMIN_PORT_CONFIG) or 0))
    print(json.dumps({"ready": True, "port": bound_ports[listeners[0].name], "ports": bound_ports,
                      "admin_port": admin_port, "pid": os.getpid(),
                      "incarnation_id": str(broker.incarnation_id)}), flush=True)
    log.info("node %d serving %s", broker.node_id,
             ", ".join(f"{l.name} on {l.host or '*'}:{bound_ports[l.name]}" for l in listeners))
    serving.set()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    retention = asyncio.create_task(broker.replicas.run_retention(config.get_int("log.retention.check.interval.ms")))
    isr_expiration = asyncio.create_task(broker.replicas.run_isr_expiration())
    checkpoints = asyncio.create_task(broker.replicas.run_checkpoints(
        config.get_int("replica.high.watermark.checkpoint.interval.ms")))
    cleaner = asyncio.create_task(broker.cleaner.run())
    offset_expiry = asyncio.create_task(broker.groups.run_offset_expiry(
        config.get_int("offsets.retention.check.interval.ms"), config.get_int("offsets.retention.minutes") * 60_000))
    transaction_expiry = asyncio.create_task(broker.transactions.run_expiration(
        config.get_int("transaction.remove.expired.transaction.cleanup.interval.ms")))
    await stop.wait()
    log.info("node %d shutting down", broker.node_id)
    await broker.metadata.controlled_shutdown()
    await cancel_and_wait([retention, isr_expiration, checkpoints, cleaner, offset_expiry, transaction_expiry])
    await server.close()
    await admin.close()
    await broker.close()
    await cancel_remaining_tasks()
    log.info("node %d stopped", broker.node_id)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=os.environ.get("KRAFTWERK_LOG_LEVEL", "INFO"), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        config.check_roles()
        config.check_replica_fetch()
        if config.process_roles != {"controller"}:
            # (every listener's protocol checked on the way, and the inter-broker TLS and login settings)
            PeerLinks(config, inter_broker_listener_name(config))
    except ConfigError as exc:
        raise SystemExit(f"cannot start: {exc}") from None
    if config.process_roles == {"controller"}:
        command = controller_command(config)
        os.execv(command[0], command)
    sys.exit(event_loop.run(run(config)))


if __name__ == "__main__":
    main()

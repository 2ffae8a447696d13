"""`kraftwerk quorum describe`: the metadata quorum, as `kafka-metadata-quorum.sh describe` prints it.

    kraftwerk quorum describe --status         # leader, epoch, high watermark, voters, observers
    kraftwerk quorum describe --replication    # one row per voter and observer: log end, lag, times

Sent as DescribeQuorum through kafka-python's admin client, to the cluster in --data-dir or to
--bootstrap-server.
"""
from __future__ import annotations

import json
import time
import uuid

import click

from cluster.cli.app import admin_client, bootstrap_option, data_dir_option, json_option, print_json
from cluster.cli.errors import fail
from cluster.formats.topic_ids import topic_id_to_kafka_string

NO_DIRECTORY = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's Uuid.ZERO_UUID, printed


@click.group()
def quorum():
    """Describe the controller quorum of the metadata log."""


@quorum.command("describe")
@click.option("--status", "what", flag_value="status", default=True, help="the quorum's state (the default)")
@click.option("--replication", "what", flag_value="replication", help="each voter's and observer's replication")
@click.option("--human-readable", is_flag=True, help="with --replication: times as 'N ms ago'")
@data_dir_option
@bootstrap_option
@json_option
def quorum_describe(what, human_readable, data_dir, bootstrap_server, as_json):
    """What kafka-metadata-quorum.sh describe --status (or --replication) prints."""
    from kafka.errors import KafkaError

    with admin_client(data_dir, bootstrap_server) as admin:
        try:
            described = admin.describe_metadata_quorum()
            cluster_id = admin.describe_cluster()["cluster_id"]
        except KafkaError as exc:
            fail(f"cannot describe the quorum: {exc}")
    state = quorum_state(described)
    if as_json:
        print_json({"cluster_id": cluster_id, **state})
    elif what == "replication":
        click.echo(replication_table(state, human_readable))
    else:
        click.echo(status_text(cluster_id, state))


def quorum_state(described: dict) -> dict:
    """The one partition of DescribeQuorum's answer, with each replica's directory id as Kafka prints it
    and the voters' endpoints."""
    [topic] = described["topics"]
    [partition] = topic["partitions"]
    if partition.get("error"):
        fail(f"cannot describe the quorum: {partition['error']}")
    endpoints = {node["node_id"]: [f"{e['name']}://{_host(e['host'])}:{e['port']}" for e in node["listeners"]]
                 for node in described.get("nodes") or []}

    def replicas(states):
        return [{"id": r["replica_id"], "directory_id": _directory_id(r["replica_directory_id"]),
                 "log_end_offset": r["log_end_offset"], "last_fetch_timestamp": r["last_fetch_timestamp"],
                 "last_caught_up_timestamp": r["last_caught_up_timestamp"],
                 "endpoints": endpoints.get(r["replica_id"], [])}
                for r in states]
    return {"leader_id": partition["leader_id"], "leader_epoch": partition["leader_epoch"],
            "high_watermark": partition["high_watermark"], "voters": replicas(partition["current_voters"]),
            "observers": replicas(partition["observers"])}


def status_text(cluster_id: str, state: dict) -> str:
    leader = next(v for v in state["voters"] if v["id"] == state["leader_id"])
    laggard = min(state["voters"], key=lambda v: v["log_end_offset"])
    if laggard is leader:
        lag_ms = 0
    elif leader["last_caught_up_timestamp"] >= 0 and laggard["last_caught_up_timestamp"] >= 0:
        lag_ms = leader["last_caught_up_timestamp"] - laggard["last_caught_up_timestamp"]
    else:
        lag_ms = -1
    return "\n".join([
        f"ClusterId:              {cluster_id}",
        f"LeaderId:               {state['leader_id']}",
        f"LeaderEpoch:            {state['leader_epoch']}",
        f"HighWatermark:          {state['high_watermark']}",
        f"MaxFollowerLag:         {leader['log_end_offset'] - laggard['log_end_offset']}",
        f"MaxFollowerLagTimeMs:   {lag_ms}",
        f"CurrentVoters:          {_replica_list(state['voters'])}",
        f"CurrentObservers:       {_replica_list(state['observers'])}",
    ])


def replication_table(state: dict, human_readable: bool = False) -> str:
    """Kafka's ToolsUtils.prettyPrintTable: columns padded to their widest value, each followed by a tab."""
    leader = next(v for v in state["voters"] if v["id"] == state["leader_id"])
    now_ms = int(time.time() * 1000)

    def when(ms: int) -> str:
        return "-1" if ms < 0 else f"{max(0, now_ms - ms)} ms ago" if human_readable else str(ms)
    rows = [[str(r["id"]), r["directory_id"], str(r["log_end_offset"]),
             str(leader["log_end_offset"] - r["log_end_offset"]), when(r["last_fetch_timestamp"]),
             when(r["last_caught_up_timestamp"]), status]
            for status, replicas in (("Leader", [leader]),
                                     ("Follower", [v for v in state["voters"] if v is not leader]),
                                     ("Observer", state["observers"]))
            for r in replicas]
    headers = ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    lines = ("".join(value.ljust(width) + "\t" for value, width in zip(row, widths)) for row in [headers, *rows])
    return "\n".join(lines)


def _replica_list(replicas: list[dict]) -> str:
    """MetadataQuorumCommand's Node.toString of each, joined as a list."""
    def node(r: dict) -> str:
        directory = "null" if r["directory_id"] == NO_DIRECTORY else json.dumps(r["directory_id"])
        endpoints = f', "endpoints": [{", ".join(json.dumps(e) for e in r["endpoints"])}]' if r["endpoints"] else ""
        return f'{{"id": {r["id"]}, "directoryId": {directory}{endpoints}}}'
    return "[" + ", ".join(node(r) for r in replicas) + "]"


def _directory_id(value) -> str:
    """A directory id as Kafka prints a Uuid; kafka-python gives it as text, or None for the zero id."""
    return topic_id_to_kafka_string(uuid.UUID(str(value))) if value else NO_DIRECTORY


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host

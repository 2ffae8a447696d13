"""One module per Kafka API. Each module defines:

    REQUEST, RESPONSE   kafka.protocol message classes (our wire codecs)
    VERSIONS            (min, max) that the handler implements and ApiVersions advertises
    async def handle(broker, header, request) -> a RESPONSE instance; or an answer encoded around
                        its record sets (node.spliced_response: SplicedResponse, EncodedResponse),
                        as Produce, Fetch and Metadata give; or None for no response (acks=0)

Each module's docstring opens with the API and the versions it serves, then says what it does,
then where it differs from Kafka. A request reaches `handle` decoded and checked against its
schema (node.request_checks): no field the schema forbids to be null is None.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Awaitable, Callable


@dataclass(frozen=True)
class ApiHandler:
    api_key: int
    request: Any
    response: Any
    min_version: int
    max_version: int
    handle: Callable[..., Awaitable[Any]]

    def request_is_flexible(self, version: int) -> bool:
        return self.request.flexible_version_q(version)

    def response_header_is_flexible(self, version: int) -> bool:
        # ApiVersions responses always use header v0 so that any client can read the error.
        return self.api_key != 18 and self.response.flexible_version_q(version)


API_MODULES = (
    "produce",
    "fetch",
    "list_offsets",
    "metadata",
    "api_versions",
    "create_topics",
    "delete_topics",
    "create_partitions",
    "describe_configs",
    "incremental_alter_configs",
    "alter_configs",
    "describe_cluster",
    "describe_topic_partitions",
    "init_producer_id",
    "find_coordinator",
    "join_group",
    "sync_group",
    "heartbeat",
    "leave_group",
    "offset_commit",
    "offset_fetch",
    "txn_offset_commit",
    "describe_groups",
    "list_groups",
    "delete_groups",
    "offset_delete",
    "elect_leaders",
    "offset_for_leader_epoch",
    "alter_partition_reassignments",
    "list_partition_reassignments",
    "unregister_broker",
    "delete_records",
    "describe_log_dirs",
    "add_partitions_to_txn",
    "add_offsets_to_txn",
    "end_txn",
    "write_txn_markers",
    "describe_producers",
    "describe_transactions",
    "list_transactions",
    "consumer_group_heartbeat",
    "consumer_group_describe",
    "share_group_heartbeat",
    "share_group_describe",
    "initialize_share_group_state",
    "read_share_group_state",
    "write_share_group_state",
    "delete_share_group_state",
    "read_share_group_state_summary",
    "describe_share_group_offsets",
    "alter_share_group_offsets",
    "delete_share_group_offsets",
    "share_fetch",
    "share_acknowledge",
    "sasl_handshake",
    "sasl_authenticate",
    "describe_user_scram_credentials",
    "alter_user_scram_credentials",
    "describe_client_quotas",
    "alter_client_quotas",
    "describe_acls", "create_acls", "delete_acls",
    "describe_quorum",
)


def _load_handlers() -> dict[int, ApiHandler]:
    handlers = {}
    for name in API_MODULES:
        module = importlib.import_module(f"node.apis.{name}")
        low, high = module.VERSIONS
        handlers[module.REQUEST.API_KEY] = ApiHandler(
            module.REQUEST.API_KEY, module.REQUEST, module.RESPONSE, low, high, module.handle
        )
    return handlers


HANDLERS: dict[int, ApiHandler] = _load_handlers()

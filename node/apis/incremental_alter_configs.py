"""IncrementalAlterConfigs v0-1: set, delete, append to or subtract from topic, broker and group configs.

Applied by the controller as ConfigRecords; each resource is answered on its own. A controller
that does not answer in time gives every resource REQUEST_TIMED_OUT. A GROUP resource's configs
(consumer.session.timeout.ms, share.record.lock.duration.ms, ...) are checked as Kafka's
GroupConfig checks them, within the broker's group.*.min/max bounds (INVALID_CONFIG otherwise);
they can be set for a group that does not exist yet.

Differs from Kafka: of a BROKER resource (a node id, or empty for every node) only the
replication throttle rates can change, the broker configs a node reads while it runs; any other
gets INVALID_REQUEST. More than 10,000 changes in one request are refused whole with
POLICY_VIOLATION, as Kafka refuses a controller operation of more than 10,000 records.
"""
from __future__ import annotations

from kafka.protocol.admin import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse

from cluster.formats.errors import ErrorCode

REQUEST = IncrementalAlterConfigsRequest
RESPONSE = IncrementalAlterConfigsResponse
VERSIONS = (0, 1)

Result = RESPONSE.AlterConfigsResourceResponse


async def handle(broker, header, request):
    resources = [{
        "resource_type": r.resource_type,
        "resource_name": r.resource_name,
        "configs": [{"name": c.name, "value": c.value, "op": c.config_operation} for c in r.configs],
    } for r in request.resources]
    try:
        reply = await broker.call_controller("alter_configs", resources=resources, validate_only=request.validate_only)
        if reply.get("error_code"):  # more than 10,000 changes: refused whole, POLICY_VIOLATION
            reply["results"] = [{**r, "error_code": reply["error_code"], "error_message": reply["error_message"]}
                                for r in resources]
        results = [Result(error_code=r["error_code"], error_message=r.get("error_message"),
                          resource_type=r["resource_type"], resource_name=r["resource_name"])
                   for r in reply["results"]]
    except Exception as exc:
        results = [Result(error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=str(exc),
                          resource_type=r["resource_type"], resource_name=r["resource_name"]) for r in resources]
    return RESPONSE[header.api_version](throttle_time_ms=0, responses=results)

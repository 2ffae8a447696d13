"""IncrementalAlterConfigs v0-1: set, delete, append to or subtract from topic, broker and group configs.

Applied by the controller as ConfigRecords; each resource is answered on its own. A controller
that does not answer in time gives every resource REQUEST_TIMED_OUT. A GROUP resource's configs
(consumer.session.timeout.ms, share.record.lock.duration.ms, ...) are checked as Kafka's
GroupConfig checks them, within the broker's group.*.min/max bounds (INVALID_CONFIG otherwise);
they can be set for a group that does not exist yet.

With an authorizer (node.security.authorizer), the request needs ALTER_CONFIGS on the topic or
group, or on the cluster for a broker; what is refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: of a BROKER resource (a node id, or empty for every node) only the
replication throttle rates can change, the broker configs a node reads while it runs; any other
gets INVALID_REQUEST. More than 10,000 changes in one request are refused whole with
POLICY_VIOLATION, as Kafka refuses a controller operation of more than 10,000 records.
"""
from __future__ import annotations

from kafka.protocol.admin import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse

from cluster.formats.acls import ALTER_CONFIGS
from cluster.formats.errors import ErrorCode
from node.security import authorizer

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
    refused = [authorizer.config_refusal(broker, header, ALTER_CONFIGS, r["resource_type"], r["resource_name"])
               for r in resources]
    allowed = [r for r, code in zip(resources, refused) if not code]
    answers = iter(await _forward(broker, allowed, request.validate_only) if allowed else ())
    return RESPONSE[header.api_version](throttle_time_ms=0, responses=[
        Result(error_code=code, error_message=None, resource_type=r["resource_type"], resource_name=r["resource_name"])
        if code else next(answers) for r, code in zip(resources, refused)])


async def _forward(broker, resources: list[dict], validate_only: bool) -> list:
    try:
        reply = await broker.call_controller("alter_configs", resources=resources, validate_only=validate_only)
        if reply.get("error_code"):  # more than 10,000 changes: refused whole, POLICY_VIOLATION
            reply["results"] = [{**r, "error_code": reply["error_code"], "error_message": reply["error_message"]}
                                for r in resources]
        return [Result(error_code=r["error_code"], error_message=r.get("error_message"),
                       resource_type=r["resource_type"], resource_name=r["resource_name"])
                for r in reply["results"]]
    except Exception as exc:
        return [Result(error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=str(exc),
                       resource_type=r["resource_type"], resource_name=r["resource_name"]) for r in resources]

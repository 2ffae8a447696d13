"""AlterConfigs v0-2: replace each resource's dynamic configs with the set named.

A config left out goes back to its default; validate_only checks without changing anything. As
Kafka 3.9 does, the node first checks each resource itself and forwards only what passes to the
controller: a resource named twice, a config named twice or a null value get INVALID_REQUEST; a
resource type other than TOPIC, BROKER or GROUP gets INVALID_REQUEST. Topic and group configs are
applied by the controller as ConfigRecords (unknown topic: UNKNOWN_TOPIC_OR_PARTITION; unknown
config name or bad value: INVALID_CONFIG; group configs checked as Kafka's GroupConfig checks them).

With an authorizer (node.security.authorizer), the request needs ALTER_CONFIGS on the topic or
group, or on the cluster for a broker; what is refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: broker configs are static here. A BROKER resource must name this node (or be
empty, for the cluster default), and naming any config in it gets the INVALID_REQUEST Kafka answers
for configs that cannot be updated dynamically. No ACLs: nothing is refused for authorization.
"""
from __future__ import annotations

from collections import Counter

from kafka.protocol.admin import AlterConfigsRequest, AlterConfigsResponse

from cluster.formats.acls import ALTER_CONFIGS
from cluster.formats.errors import ErrorCode
from cluster.formats.image import CONFIG_RESOURCE_BROKER, CONFIG_RESOURCE_GROUP, CONFIG_RESOURCE_TOPIC
from node.security import authorizer

REQUEST = AlterConfigsRequest
RESPONSE = AlterConfigsResponse
VERSIONS = (0, 2)

Result = RESPONSE.AlterConfigsResourceResponse


async def handle(broker, header, request):
    named = Counter((r.resource_type, r.resource_name) for r in request.resources)
    errors = [_refused(broker, header, r) or _local_error(broker, r, named) for r in request.resources]
    forwarded = [r for r, error in zip(request.resources, errors) if error is None]
    answers = await _forward(broker, forwarded, request.validate_only)
    results = []
    for resource, error in zip(request.resources, errors):
        code, message = error or answers.get((resource.resource_type, resource.resource_name), (ErrorCode.NONE, None))
        results.append(Result(error_code=code, error_message=message, resource_type=resource.resource_type,
                              resource_name=resource.resource_name))
    return RESPONSE[header.api_version](throttle_time_ms=0, responses=results)


def _refused(broker, header, resource) -> tuple[ErrorCode, None] | None:
    code = authorizer.config_refusal(broker, header, ALTER_CONFIGS, resource.resource_type, resource.resource_name)
    return (code, None) if code else None


def _local_error(broker, resource, named: Counter) -> tuple[ErrorCode, str | None] | None:
    """The answer for a resource settled on the node, as in Kafka's ConfigAdminManager.preprocess;
    None for a topic or group resource, which goes on to the controller."""
    if named[(resource.resource_type, resource.resource_name)] > 1:
        return ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."
    names = [c.name for c in resource.configs]
    if len(set(names)) < len(names):
        return ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys"
    nulls = [c.name for c in resource.configs if c.value is None]
    if nulls:
        return ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls)
    if resource.resource_type == CONFIG_RESOURCE_BROKER:
        return _broker_error(broker, resource.resource_name, names)
    if resource.resource_type not in (CONFIG_RESOURCE_TOPIC, CONFIG_RESOURCE_GROUP):
        return ErrorCode.INVALID_REQUEST, f"Unknown resource type {resource.resource_type}"
    return None


def _broker_error(broker, name: str, config_names: list[str]) -> tuple[ErrorCode, str | None]:
    if name and name != str(broker.node_id):
        if not name.lstrip("-").isdigit():
            return ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}"
        return ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {broker.node_id}, but received {name}"
    if config_names:
        return ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: {sorted(config_names)}"
    return ErrorCode.NONE, None  # replacing no dynamic configs with none


async def _forward(broker, resources, validate_only: bool) -> dict[str, tuple[int, str | None]]:
    """(resource type, name) -> (error code, message) from the controller."""
    if not resources:
        return {}
    wanted = [{"resource_type": r.resource_type, "resource_name": r.resource_name,
               "configs": {c.name: c.value for c in r.configs}} for r in resources]
    try:
        reply = await broker.call_controller("replace_configs", resources=wanted, validate_only=validate_only)
    except Exception as exc:
        return {(r.resource_type, r.resource_name): (ErrorCode.REQUEST_TIMED_OUT, str(exc)) for r in resources}
    return {(r["resource_type"], r["resource_name"]): (r["error_code"], r.get("error_message"))
            for r in reply["results"]}

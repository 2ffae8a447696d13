"""DescribeConfigs v0-4: topic configs (effective values and their sources), this node's broker configs, and group configs.

A topic that does not exist gets UNKNOWN_TOPIC_OR_PARTITION; configuration_keys narrows the
answer. A GROUP resource lists every group config, whether or not the group exists: those the
group sets with source GROUP_CONFIG (8), the others DEFAULT_CONFIG with the broker's value, as
Kafka's ConfigHelper answers it; an empty group name gets INVALID_REQUEST.

With an authorizer (node.security.authorizer), the request needs DESCRIBE_CONFIGS on the topic or
group, or on the cluster for a broker; what is refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: include_synonyms lists each config as its own only synonym, not the chain of
levels it could come from. Broker configs can be described on that broker only (or with an empty
name), others get INVALID_REQUEST, as do resource types other than TOPIC, BROKER and GROUP (no
broker loggers, no client metrics). Config types are filled in for group configs only;
documentation is not.
"""
from __future__ import annotations

from kafka.protocol.admin import DescribeConfigsRequest, DescribeConfigsResponse

from cluster.formats.acls import DESCRIBE_CONFIGS
from cluster.formats.image import CONFIG_RESOURCE_BROKER, CONFIG_RESOURCE_GROUP, CONFIG_RESOURCE_TOPIC
from cluster.formats.errors import ErrorCode
from node.group_configs import group_config_entries
from node.security import authorizer
from node.topic_configs import DEFAULT_CONFIG, broker_config_entries, topic_config_entries

REQUEST = DescribeConfigsRequest
RESPONSE = DescribeConfigsResponse
VERSIONS = (0, 4)

Result = RESPONSE.DescribeConfigsResult
Entry = Result.DescribeConfigsResourceResult


async def handle(broker, header, request):
    results = [_describe(broker, resource, request.include_synonyms)
               if not (refused := authorizer.config_refusal(broker, header, DESCRIBE_CONFIGS, resource.resource_type,
                                                            resource.resource_name))
               else Result(error_code=refused, error_message=None, resource_type=resource.resource_type,
                           resource_name=resource.resource_name, configs=[])
               for resource in request.resources]
    return RESPONSE[header.api_version](throttle_time_ms=0, results=results)


def _describe(broker, resource, include_synonyms: bool):
    def failed(code, message):
        return Result(error_code=code, error_message=message, resource_type=resource.resource_type,
                      resource_name=resource.resource_name, configs=[])

    if resource.resource_type == CONFIG_RESOURCE_TOPIC:
        if broker.topic(resource.resource_name) is None:
            return failed(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {resource.resource_name} does not exist")
        entries = topic_config_entries(broker, resource.resource_name)
    elif resource.resource_type == CONFIG_RESOURCE_BROKER:
        if resource.resource_name not in ("", str(broker.node_id)):
            return failed(ErrorCode.INVALID_REQUEST, "broker configs can be described on that broker only")
        entries = broker_config_entries(broker)
    elif resource.resource_type == CONFIG_RESOURCE_GROUP:
        if not resource.resource_name:
            return failed(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
        entries = group_config_entries(broker, resource.resource_name)
    else:
        return failed(ErrorCode.INVALID_REQUEST, f"unsupported resource type {resource.resource_type}")
    keys = resource.configuration_keys
    if keys:
        entries = [e for e in entries if e.name in keys]
    configs = [Entry(
        name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
        is_default=e.source == DEFAULT_CONFIG, is_sensitive=e.sensitive,
        synonyms=[Entry.DescribeConfigsSynonym(name=e.name, value=e.value, source=e.source)] if include_synonyms else [],
        config_type=e.config_type, documentation=None,
    ) for e in entries]
    return Result(error_code=ErrorCode.NONE, error_message=None, resource_type=resource.resource_type,
                  resource_name=resource.resource_name, configs=configs)

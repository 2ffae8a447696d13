"""AlterClientQuotas v0-1: set or remove quotas of user, client-id and IP entities.

Forwarded to the controller, which checks each entry as Kafka's ClientQuotaControlManager does
(INVALID_REQUEST with Kafka's message for an empty or badly combined entity, an unknown key, a value
not above 0, a fraction for an integral key, a duplicated key or entity) and writes ClientQuotaRecords
for the rest; with validate_only nothing is written. Each entity is answered once. A controller
that does not answer gives every entry REQUEST_TIMED_OUT. node.security.quotas enforces the quotas.

With an authorizer (node.security.authorizer), the request needs ALTER_CONFIGS on the cluster; what
is refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: an IP entity's name must be an IP address (or localhost); Kafka also takes a
host name it can resolve.
"""
from __future__ import annotations

from kafka.protocol.admin import AlterClientQuotasRequest, AlterClientQuotasResponse

from cluster.formats.acls import ALTER_CONFIGS
from cluster.formats.errors import ErrorCode
from node.security import authorizer

REQUEST = AlterClientQuotasRequest
RESPONSE = AlterClientQuotasResponse
VERSIONS = (0, 1)


async def handle(broker, header, request):
    entries = [{"entity": [[e.entity_type, e.entity_name] for e in entry.entity],
                "ops": [[op.key, op.value, op.remove] for op in entry.ops]} for entry in request.entries]
    if not authorizer.allowed(broker, header, ALTER_CONFIGS):
        return _answer(header, [{"entity": entry["entity"], "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                 "error_message": None} for entry in entries])
    try:
        reply = await broker.call_controller("alter_client_quotas", entries=entries,
                                             validate_only=request.validate_only)
        if reply.get("error_code"):  # more than 10,000 records: refused whole
            results = [{"entity": entry["entity"], "error_code": reply["error_code"],
                        "error_message": reply["error_message"]} for entry in entries]
        else:
            results = reply["results"]
    except Exception as exc:
        results = [{"entity": entry["entity"], "error_code": ErrorCode.REQUEST_TIMED_OUT, "error_message": str(exc)}
                   for entry in entries]
    return _answer(header, results)


def _answer(header, results: list[dict]):
    Entry = RESPONSE[header.api_version].EntryData
    return RESPONSE[header.api_version](throttle_time_ms=0, entries=[
        Entry(error_code=r["error_code"], error_message=r["error_message"],
              entity=[Entry.EntityData(entity_type=kind, entity_name=name) for kind, name in r["entity"]])
        for r in results])

"""AlterUserScramCredentials v0: add, replace or delete users' SCRAM credentials.

Forwarded to the controller (controller/scram_credentials.py), which checks each user as Kafka's
ScramControlManager does (DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL, UNSUPPORTED_SASL_MECHANISM,
RESOURCE_NOT_FOUND) and writes UserScramCredentialRecords and RemoveUserScramCredentialRecords;
the answer comes once this node has applied them, so a login right after succeeds here. An
upsertion carries the salted password, never the password. A controller that does not answer
gives every user REQUEST_TIMED_OUT.

With an authorizer (node.security.authorizer), the request needs ALTER on the cluster; what is
refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: users are answered deletions first, then upsertions, then refusals, each in
the order asked, where Kafka's order follows hash maps.
"""
from __future__ import annotations

from kafka.protocol.admin import AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse

from cluster.formats.acls import ALTER
from cluster.formats.errors import ErrorCode
from node.security import authorizer

REQUEST = AlterUserScramCredentialsRequest
RESPONSE = AlterUserScramCredentialsResponse
VERSIONS = (0, 0)

Result = RESPONSE.AlterUserScramCredentialsResult


async def handle(broker, header, request):
    deletions = [{"name": d.name, "mechanism": d.mechanism} for d in request.deletions]
    upsertions = [{"name": u.name, "mechanism": u.mechanism, "iterations": u.iterations, "salt": bytes(u.salt),
                   "salted_password": bytes(u.salted_password)} for u in request.upsertions]
    if not authorizer.allowed(broker, header, ALTER):  # (as Kafka: ALTER on the cluster)
        return RESPONSE[header.api_version](throttle_time_ms=0, results=[
            Result(user=user, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None)
            for user in dict.fromkeys(item["name"] for item in deletions + upsertions)])
    try:
        reply = await broker.call_controller("alter_scram_credentials", deletions=deletions, upsertions=upsertions)
        results = [Result(user=r["user"], error_code=r["error_code"], error_message=r["error_message"])
                   for r in reply["results"]]
    except Exception as exc:
        users = dict.fromkeys(item["name"] for item in deletions + upsertions)
        results = [Result(user=user, error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=str(exc))
                   for user in users]
    return RESPONSE[header.api_version](throttle_time_ms=0, results=results)

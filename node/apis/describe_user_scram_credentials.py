"""DescribeUserScramCredentials v0: each user's SCRAM mechanisms and iteration counts, from the metadata image.

No users (null or empty) describes every user with a credential. A user named twice is answered
with DUPLICATE_RESOURCE, a user without credentials with RESOURCE_NOT_FOUND, in Kafka's words
(ScramImage.describe). Salts and keys are never answered.

With an authorizer (node.security.authorizer), the request needs DESCRIBE on the cluster; what is
refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: users are answered in the order asked (all users: by name), where Kafka's
order follows a hash map.
"""
from __future__ import annotations

from kafka.protocol.admin import DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse

from cluster.formats.acls import DESCRIBE
from cluster.formats.errors import ErrorCode
from node.security import authorizer

REQUEST = DescribeUserScramCredentialsRequest
RESPONSE = DescribeUserScramCredentialsResponse
VERSIONS = (0, 0)

Result = RESPONSE.DescribeUserScramCredentialsResult
CredentialInfo = Result.CredentialInfo


async def handle(broker, header, request):
    if not authorizer.allowed(broker, header, DESCRIBE):  # (as Kafka: DESCRIBE on the cluster)
        return RESPONSE[header.api_version](throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                            error_message=None, results=[])
    credentials = broker.image.scram_credentials
    names = [u.name for u in request.users or []] or sorted(credentials)
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    results = [_result(name, counts[name], credentials.get(name)) for name in counts]
    return RESPONSE[header.api_version](throttle_time_ms=0, error_code=0, error_message=None, results=results)


def _result(name: str, count: int, credentials) -> Result:
    if count > 1:
        return Result(user=name, error_code=ErrorCode.DUPLICATE_RESOURCE, credential_infos=[],
                      error_message=f"Cannot describe SCRAM credentials for the same user twice in a single "
                                    f"request: {name}")
    if not credentials:
        return Result(user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND, credential_infos=[],
                      error_message=f"Attempt to describe a user credential that does not exist: {name}")
    infos = [CredentialInfo(mechanism=code, iterations=c.iterations) for code, c in sorted(credentials.items())]
    return Result(user=name, error_code=0, error_message=None, credential_infos=infos)

"""ApiVersions v0-4: advertise exactly the version range each handler implements (KIP-511 aware).

A version we do not speak is answered in the v0 layout with UNSUPPORTED_VERSION and our list, so
that any client can read it (node.server). The answer also carries metadata.version as a
supported and finalized feature (v3+). Every connection asks first, so the encoded answer is kept
per version and finalized features: the handlers' ranges never change once the node runs.

Differs from Kafka: the client's software name and version (v3+) are not checked against
Kafka's pattern, so a client never gets INVALID_REQUEST for them; metadata.version is the only
feature listed.
"""
from functools import cache, lru_cache

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from cluster.formats.errors import ErrorCode
from node.spliced_response import EncodedResponse

REQUEST = ApiVersionsRequest
RESPONSE = ApiVersionsResponse
API_KEY = ApiVersionsRequest.API_KEY
VERSIONS = (0, 4)
# metadata.version that our KRaft records correspond to (Kafka 3.7-IV4).
METADATA_VERSION_LEVEL = 19


@cache
def _api_keys():
    from node.apis import HANDLERS  # the registry imports this module

    Key = RESPONSE.ApiVersion
    return [Key(api_key=h.api_key, min_version=h.min_version, max_version=h.max_version)
            for h in sorted(HANDLERS.values(), key=lambda h: h.api_key)]


def unsupported_version_response():
    """What a client asking with a version we do not speak gets: v0 layout, error 35, our list."""
    return RESPONSE[0](error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=_api_keys())


async def handle(broker, header, request):
    level = broker.image.features.get("metadata.version", METADATA_VERSION_LEVEL)
    # (v0-2 carry no features: one answer each, whatever the image says)
    features_epoch = max(broker.image.offset, -1) if header.api_version >= 3 else None
    return EncodedResponse([_encoded(header.api_version, level, features_epoch)])


@lru_cache(maxsize=32)
def _encoded(version: int, level: int, features_epoch: int | None) -> bytes:
    """The answer's body. (v3+ answers change with each metadata offset: the last few are kept.)"""
    return RESPONSE[version](
        error_code=ErrorCode.NONE,
        api_keys=_api_keys(),
        throttle_time_ms=0,
        supported_features=[RESPONSE.SupportedFeatureKey(name="metadata.version", min_version=1, max_version=level)],
        finalized_features_epoch=-1 if features_epoch is None else features_epoch,
        finalized_features=[RESPONSE.FinalizedFeatureKey(name="metadata.version", max_version_level=level,
                                                         min_version_level=level)],
        zk_migration_ready=False,
    ).encode(version=version)

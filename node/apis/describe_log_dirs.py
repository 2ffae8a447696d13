"""DescribeLogDirs v0-4: the node's one log directory with the size of each partition it hosts
(all, or those asked for), as `kafka-log-dirs.sh --describe` reads them; from v4 the volume's
total and usable bytes.

A partition's offset lag is how far its log end trails its high watermark, which it never does
for a current log (Kafka answers the same). Partitions asked for but not hosted are left out.

With an authorizer (node.security.authorizer), the request needs DESCRIBE on the cluster; what is
refused gets Kafka's *_AUTHORIZATION_FAILED.

Differs from Kafka: there is one log directory per node (no `log.dirs` list), so no future logs
(AlterReplicaLogDirs) and no KAFKA_STORAGE_ERROR for an offline directory.
"""
from __future__ import annotations

import os
from collections import defaultdict

from kafka.protocol.admin import DescribeLogDirsRequest, DescribeLogDirsResponse

from cluster.formats.acls import DESCRIBE
from cluster.formats.errors import ErrorCode
from node.security import authorizer

REQUEST = DescribeLogDirsRequest
RESPONSE = DescribeLogDirsResponse
VERSIONS = (0, 4)

Result = RESPONSE.DescribeLogDirsResult
Topic = Result.DescribeLogDirsTopic


async def handle(broker, header, request):
    if not authorizer.allowed(broker, header, DESCRIBE):
        return RESPONSE[header.api_version](throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                            results=[])
    wanted = None if request.topics is None else {(t.topic, p) for t in request.topics for p in t.partitions}
    by_topic: dict[str, list] = defaultdict(list)
    for (topic, index), partition in sorted(broker.replicas.partitions.items()):
        if wanted is not None and (topic, index) not in wanted:
            continue
        partition_log = partition.log
        by_topic[topic].append(Topic.DescribeLogDirsPartition(
            partition_index=index, partition_size=partition_log.size_bytes(),
            offset_lag=max(partition_log.high_watermark - partition_log.log_end_offset, 0), is_future_key=False))
    volume = os.statvfs(broker.log_dir)
    result = Result(error_code=ErrorCode.NONE, log_dir=str(os.path.abspath(broker.log_dir)),
                    topics=[Topic(name=name, partitions=partitions) for name, partitions in by_topic.items()],
                    total_bytes=volume.f_blocks * volume.f_frsize, usable_bytes=volume.f_bavail * volume.f_frsize)
    return RESPONSE[header.api_version](throttle_time_ms=0, error_code=ErrorCode.NONE, results=[result])

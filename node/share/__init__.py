"""Share groups (KIP-932) on the partition leaders: which records each share group's consumers get.

- partition: a share-partition, one per (share group, topic, partition) led here: in-flight
  records, their delivery states and counts, acquisition locks, the start offset.
- manager: the share-partitions of this node, loaded through the persister on first use and
  dropped when this node stops leading their partition.
- sessions: share sessions (ShareSessionEpoch), the partitions each member fetches.
"""

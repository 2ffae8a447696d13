"""The group coordinator: consumer groups, their committed offsets, and `__consumer_offsets`.

- coordinator: what the group APIs call. The group map, whether this node coordinates a group,
  and loading or dropping a partition's groups as its leadership comes and goes.
- consumer_classic_members: members of the classic protocol inside a consumer group (its
  JoinGroup, SyncGroup, Heartbeat, LeaveGroup).
- consumer_membership: KIP-848 consumer groups (ConsumerGroupHeartbeat): group epochs, target
  assignments, fencing. consumer_reconciliation: how a member moves to its target (revoke first).
  consumer_subscriptions: topic names and RE2 regexes resolved against metadata. assignors: the
  server-side `uniform` and `range` assignors.
- migration: classic groups upgraded to consumer groups and back (group.consumer.migration.policy).
- classic: classic groups (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) and their rebalances.
- consumer: the consumer group and member model. consumer_records: their records in
  `__consumer_offsets` (key types 3-8).
- share: KIP-932 share groups (ShareGroupHeartbeat, ShareGroupDescribe): the group and member
  model, epochs, sessions, target assignments given at once. share_assignor: the `simple`
  assignor. share_records: their records in `__consumer_offsets` (key types 9-15).
- offsets: the committed offsets of every group, whatever its type, and those transactions
  committed that wait for their transaction's end.
- persistence: appending the coordinator's records to `__consumer_offsets`, and replaying them.
- records: the record formats. placement: a group's partition, and how the topic is created.

Each module imports only modules listed after it. The group map holds groups of every type
(`group.group_type`: "classic", "consumer", "share"); the coordinator routes to each type's membership,
and every type keeps its offsets in the one offset store.
"""

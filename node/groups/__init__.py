"""The group coordinator: consumer groups, their committed offsets, and `__consumer_offsets`.

- coordinator: what the group APIs call. The group map, whether this node coordinates a group,
  and loading or dropping a partition's groups as its leadership comes and goes.
- classic: classic groups (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) and their rebalances.
- offsets: the committed offsets of every group, whatever its type, and those transactions
  committed that wait for their transaction's end.
- persistence: appending the coordinator's records to `__consumer_offsets`, and replaying them.
- records: the record formats. placement: a group's partition, and how the topic is created.

Each module imports only modules listed after it. Classic groups are the only type so far; a
group type of its own (KIP-848 consumer groups, KIP-932 share groups) goes in a module beside
classic, for the coordinator to route to by the group's type, its offsets kept in the offset
store as classic groups' are.
"""

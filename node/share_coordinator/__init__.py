"""The share coordinator (KIP-932): the durable state of every share-partition, in `__share_group_state`.

- state: what a share-partition's state is (the contract between partition leaders and the
  coordinator): its start offset, state epoch, and the delivery state of records past it.
- records: ShareSnapshot and ShareUpdate, the records of `__share_group_state`, in Kafka's layouts.
- batches: how a write's state batches merge into the stored ones.
- placement: which `__share_group_state` partition holds a share-partition, and how the topic is made.
- coordinator: the share coordinator of the state partitions this node leads (load, replay, fencing).
- service: what the five share-state RPCs in node/apis have in common.
- persister: the SharePersister partition leaders call (broker.share_persister), here or over the wire.
- group_offsets: what the share-group offset admin APIs ask of the group coordinator.
"""

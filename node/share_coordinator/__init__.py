"""The share coordinator (KIP-932): the durable state of every share-partition, in `__share_group_state`.

- state: what a share-partition's state is (the contract between partition leaders and the
  coordinator): its start offset, state epoch, and the delivery state of records past it.
"""

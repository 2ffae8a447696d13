"""The transaction coordinator (KIP-98): the transactional ids whose `__transaction_state` partitions
this node leads, their state machine, its records, and the markers that end transactions."""

"""The group coordinator: consumer groups, their committed offsets, and `__consumer_offsets`."""

"""The `kraftwerk` command line: launch, inspect and use a cluster from a shell.

Each module holds one group of commands; this is where they join the root group of cluster.cli.app,
so `kraftwerk = "cluster.cli:main"` and `from cluster.cli import main` get every command.
"""
from __future__ import annotations

from cluster.cli import (
    acls, checks, controllers, groups, grow, lifecycle, messages, nodes, quorum, quotas, topics, transactions,
    users,
)
from cluster.cli.app import main

__all__ = ["main"]

for command in (lifecycle.up, lifecycle.down, lifecycle.status,
                topics.topic, messages.produce, messages.consume, groups.group, transactions.txn,
                nodes.node, controllers.controller, grow.rebalance, grow.reassign,
                checks.check_failover, checks.bench, users.user, quotas.quota, acls.acl, quorum.quorum):
    main.add_command(command)

nodes.node.add_command(grow.node_add)
nodes.node.add_command(grow.node_remove)

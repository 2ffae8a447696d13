"""Cluster administration and checks built on `Cluster`: group tools, reassignment plans, the failover check."""

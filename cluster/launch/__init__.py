"""Running a cluster: `Cluster` starts, stops and injects faults into a controller and its nodes."""
from cluster.launch.cluster import Cluster, ClusterError, cluster_class, pid_alive

__all__ = ["Cluster", "ClusterError", "cluster_class", "pid_alive"]

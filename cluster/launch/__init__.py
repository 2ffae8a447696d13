"""Running a cluster: `Cluster` starts, stops and injects faults into a controller and its nodes,
as processes on this machine; `DockerCluster` does the same with one container per process."""
from cluster.launch.backend import pid_alive
from cluster.launch.cluster import Cluster, DockerCluster, cluster_class
from cluster.tools.errors import ClusterError

__all__ = ["Cluster", "ClusterError", "DockerCluster", "cluster_class", "pid_alive"]

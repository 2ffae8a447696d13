"""Running a cluster: `Cluster` (cluster.py) starts, stops and injects faults into a controller and
its nodes through a backend (backend.py, the interface): as processes on this machine, forked by a
fork server (local_backend.py, fork_client.py, fork_server.py); `DockerCluster` (docker_backend.py,
docker_faults.py) does the same with one container per process. What is built on a Cluster
(reassignment, adding and removing nodes, group tools, the failover check) is in cluster.tools."""
from cluster.launch.backend import pid_alive
from cluster.launch.cluster import Cluster, DockerCluster, cluster_class
from cluster.tools.errors import ClusterError

__all__ = ["Cluster", "ClusterError", "DockerCluster", "cluster_class", "pid_alive"]

"""Each backend's Cluster class is found by the name `kraftwerk up --backend` takes and cluster.json records."""
import pytest

from cluster.launch.cluster import CLUSTER_CLASSES, Cluster, ClusterError, DockerCluster, cluster_class


def test_every_backend_is_named_by_its_own_class():
    assert CLUSTER_CLASSES == {"process": Cluster, "docker": DockerCluster}
    assert all(kind.backend == name for name, kind in CLUSTER_CLASSES.items())
    with pytest.raises(ClusterError, match="expected process or docker"):
        cluster_class("podman")


"""kraftwerk's shared formats and the user-facing layer; `from cluster import Cluster`."""


def __getattr__(name):
    # The launcher loads only when asked for, so that node processes start without it.
    if name in ("Cluster", "ClusterError"):
        from cluster import launcher

        return getattr(launcher, name)
    raise AttributeError(name)

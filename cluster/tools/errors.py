"""The exception of the launcher (cluster/launch) and the cluster tools, in a module of its own:
the tools raise it and the command line catches it without importing the launcher."""


class ClusterError(Exception):
    """The cluster could not be started, found or controlled."""

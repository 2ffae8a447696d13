"""The exceptions of the launcher (cluster/launch) and the cluster tools, in a module of their own:
the tools raise them and the command line catches them without importing the launcher.

They carry facts; the command line (cluster/cli/errors.py) words them for people.
"""
from __future__ import annotations

from cluster.formats.errors import ErrorCode


class ClusterError(Exception):
    """The cluster could not be started, found or controlled."""


class GroupRefused(ClusterError):
    """A request about a consumer group was refused with Kafka's error `code`; `member` names the
    member it was about, if any."""

    def __init__(self, group_id: str, code: int, member: str | None = None):
        self.group_id = group_id
        self.code = int(code)
        self.member = member
        about = f" (member '{member}')" if member is not None else ""
        super().__init__(f"consumer group '{group_id}'{about}: {self.error_name}")

    @property
    def error_name(self) -> str:
        """Kafka's name of the error, as in its protocol guide (GROUP_ID_NOT_FOUND)."""
        try:
            return ErrorCode(self.code).name
        except ValueError:
            return f"error code {self.code}"

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
        return error_name(self.code)


class TransactionRefused(ClusterError):
    """A transaction tool's request was refused with Kafka's error `code`; `failed` says what could not
    be done, in the words of Kafka's kafka-transactions.sh (Failed to describe producers for ...)."""

    def __init__(self, failed: str, code: int):
        self.failed = failed
        self.code = int(code)
        super().__init__(f"{failed}: {error_name(self.code)}")


def error_name(code: int) -> str:
    """Kafka's name of an error code, as in its protocol guide (GROUP_ID_NOT_FOUND)."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"

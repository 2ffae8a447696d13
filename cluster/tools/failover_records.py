"""What a failover check records and reports: the faults it injected, the cluster changes it made,
each acknowledged or failed send, the unavailability windows, and the audit's verdict (`Report`),
which cluster/tools/failover_report.py renders."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from cluster.tools.group_readers import ClientError, GroupAudit
from cluster.tools.topic_creations import CreationAudit
from cluster.tools.transaction_writers import TransactionAudit


@dataclass
class FaultRecord:
    fault: str
    node: int
    started_s: float
    healed_s: float | None = None
    error: str | None = None  # the cluster refused to inject or heal it


@dataclass
class ChangeRecord:
    """A change of the group's or the cluster's membership during the run."""
    change: str
    started_s: float
    detail: str = ""
    finished_s: float | None = None
    error: str | None = None


@dataclass
class Window:
    partition: int
    start_s: float
    end_s: float

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s


@dataclass
class Ack:
    partition: int
    offset: int
    at_s: float


@dataclass
class Failure:
    """A send the producer gave up on: it may or may not have been written."""
    partition: int
    value: str
    error: str  # the client's exception class, e.g. OutOfOrderSequenceNumberError
    detail: str  # its message, with the broker's error message when there is one
    at_s: float
    expected: bool  # a retriable error, which failover causes on Kafka too


@dataclass
class Evidence:
    """What the read-back shows for one message the audit found wrong."""
    value: str
    problem: str  # lost, duplicated, at another offset, out of order
    ack: Ack | None  # None: never acknowledged (a duplicate of a failed send)
    found: list[tuple[int, int]]  # (partition, offset) of each copy read back
    at_acknowledged_offset: str | None  # what the partition now holds at the acknowledged offset


@dataclass
class Report:
    seed: int
    topic: str
    duration_s: float
    faults: list[FaultRecord]
    sent: int
    acknowledged: int
    failures: list[Failure]
    lost: list[str]
    duplicated: list[str]
    misplaced: list[str]  # present once, but not at the offset its acknowledgement gave
    reordered: list[str]
    unacknowledged_present: list[str]  # failed sends that were written after all: allowed
    windows: list[Window]
    last_heal_s: float
    acknowledged_after_last_heal: int
    in_sync_at_end: bool = True
    evidence: list[Evidence] = field(default_factory=list)
    unread: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition -> (read up to, end offset)
    changes: list[ChangeRecord] = field(default_factory=list)
    group: GroupAudit | None = None
    client_errors: list[ClientError] = field(default_factory=list)
    cluster_errors: list[str] = field(default_factory=list)  # lines the cluster logged at ERROR during the run
    transactions: TransactionAudit | None = None
    creations: CreationAudit | None = None  # with controller faults: the topics an admin created

    @property
    def writes_ok(self) -> bool:
        # A partition that could not be read to its end cannot vouch for its acknowledged messages.
        return not (self.lost or self.duplicated or self.misplaced or self.reordered or self.unread)

    @property
    def unexpected_errors(self) -> list[ClientError]:
        return [error for error in self.client_errors if not error.expected]

    @property
    def ok(self) -> bool:
        return (self.writes_ok and (self.group is None or self.group.ok) and not self.unexpected_errors
                and (self.transactions is None or self.transactions.ok)
                and (self.creations is None or self.creations.ok)
                and not self.cluster_errors and not any(change.error for change in self.changes))

    @property
    def failed(self) -> Counter:
        return Counter(f.error for f in self.failures)

    @property
    def longest_unavailable_s(self) -> float:
        return max((w.length_s for w in self.windows), default=0.0)

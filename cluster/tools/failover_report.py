"""The failover checker's report as rich renderables: the fault and change logs, unavailability
windows, failed sends, client errors, the group's and the transactions' audits and the verdict."""
from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from cluster.tools.failover_check import PRODUCER_REQUEST_TIMEOUT_MS, UNAVAILABLE_AFTER_S
from cluster.tools.failover_records import Failure, Report
from cluster.tools.group_readers import ClientError
from cluster.tools.transaction_writers import TransactionAudit


def render(report: Report):
    """The fault and change logs, the unavailability windows, failed sends, client errors, the group's
    audit and the verdict, as rich renderables."""
    parts = [_fault_table(report)]
    if report.changes:
        parts.append(_change_table(report))
    parts.append(_window_table(report))
    if report.failures:
        parts.append(_failure_table(report))
    if report.client_errors:
        parts.append(_client_error_table(report))
    if report.evidence:
        parts.append(_evidence_table(report))
    if report.transactions and report.transactions.problems:
        parts.append(_transaction_problem_table(report, report.transactions))
    parts.extend(Text(line) for line in [*_summary(report), *_group_summary(report),
                                         *_transaction_summary(report), *_creation_summary(report),
                                         *_cluster_errors(report)])
    problems = _problems(report)
    verdict = Text("PASS: every acknowledged message is present once, in order"
                   + (", and the group read every one" if report.group else "")
                   + ("; every committed transaction whole, once and in order, no aborted one visible"
                      if report.transactions else "")
                   + ("; every acknowledged topic creation present" if report.creations else "")
                   + "; no unexpected client error, nothing logged at ERROR" if not problems
                   else "FAIL: " + "; ".join(problems), style="green" if not problems else "bold red")
    return Group(*parts, verdict)


def _problems(report: Report) -> list[str]:
    """What makes the run fail, one phrase each."""
    problems = []
    if not report.writes_ok:
        problems.append("acknowledged messages were lost, duplicated, moved or reordered, or not all read")
    if report.group and not report.group.ok:
        problems.append("the group missed acknowledged messages, read what the log does not hold, "
                        "committed past the log's end, or did not read to the end")
    if report.transactions and not report.transactions.ok:
        problems.append("a committed transaction was lost, split, duplicated or reordered, an aborted one was "
                        "visible, or the transactions could not all be read")
    if report.creations and not report.creations.ok:
        problems.append(f"{len(report.creations.missing)} acknowledged topic creations are missing"
                        if report.creations.listed else "the topics could not be listed to audit their creations")
    if report.unexpected_errors:
        problems.append(f"{len(report.unexpected_errors)} unexpected client errors")
    if report.cluster_errors:
        problems.append(f"{len(report.cluster_errors)} lines logged at ERROR")
    if any(change.error for change in report.changes):
        problems.append("a change of the cluster or the group failed")
    return problems


def _fault_table(report: Report):
    refusals = any(record.error for record in report.faults)
    faults = Table(title=f"faults (seed {report.seed})")
    for column in ("at", "fault", "node", "healed at", *(("refused",) if refusals else ())):
        faults.add_column(column)
    for record in report.faults:
        healed = f"{record.healed_s:.1f}s" if record.healed_s is not None else "-"
        faults.add_row(f"{record.started_s:.1f}s", record.fault, str(record.node), healed,
                       *((record.error or "",) if refusals else ()))
    return faults


def _change_table(report: Report):
    changes = Table(title="changes of the group and the cluster")
    for column in ("at", "change", "done at", "outcome"):
        changes.add_column(column)
    for record in report.changes:
        done = f"{record.finished_s:.1f}s" if record.finished_s is not None else "-"
        changes.add_row(f"{record.started_s:.1f}s", record.change, done,
                        f"failed: {record.error}" if record.error else record.detail)
    return changes


def _during(report: Report, start_s: float, end_s: float) -> str:
    """The faults and changes that overlapped a stretch of the run."""
    faults = [f"{r.fault} {r.node}" for r in report.faults
              if r.started_s <= end_s and (r.healed_s or report.duration_s) >= start_s]
    changes = [c.change for c in report.changes
               if c.started_s <= end_s and (c.finished_s or report.duration_s) >= start_s]
    return ", ".join([*faults, *changes]) or "-"


def _window_table(report: Report):
    windows = Table(title=f"writes unavailable for more than {UNAVAILABLE_AFTER_S:.0f}s")
    for column in ("partition", "from", "to", "length", "during"):
        windows.add_column(column)
    for window in report.windows:
        windows.add_row(str(window.partition), f"{window.start_s:.1f}s", f"{window.end_s:.1f}s",
                        f"{window.length_s:.2f}s", _during(report, window.start_s, window.end_s))
    return windows


def _failure_table(report: Report):
    """Failed sends grouped by partition and error, with the faults they fell into."""
    groups: dict[tuple[int, str], list[Failure]] = {}
    for failure in report.failures:
        groups.setdefault((failure.partition, failure.error), []).append(failure)
    table = Table(title="sends that failed (each may or may not have been written)")
    for column in ("partition", "error", "count", "from", "to", "during", "first message"):
        table.add_column(column)
    for (partition, name), failures in sorted(groups.items(), key=lambda g: g[1][0].at_s):
        first, last = failures[0], failures[-1]
        table.add_row(str(partition), name, str(len(failures)), f"{first.at_s:.1f}s", f"{last.at_s:.1f}s",
                      _during(report, first.at_s, last.at_s), f"{first.value}: {first.detail}")
    return table


def _client_error_table(report: Report):
    """Errors the clients saw, grouped by client and error, with the faults they fell into."""
    groups: dict[tuple[str, str], list[ClientError]] = {}
    for error in report.client_errors:
        groups.setdefault((error.client, error.error), []).append(error)
    table = Table(title="errors the clients saw")
    for column in ("client", "error", "expected", "count", "from", "to", "during", "first"):
        table.add_column(column)
    for (client, name), errors in sorted(groups.items(), key=lambda g: (g[1][0].expected, g[1][0].at_s)):
        first, last = errors[0], errors[-1]
        table.add_row(client, name, "yes" if first.expected else "[bold red]no[/]", str(len(errors)),
                      f"{first.at_s:.1f}s", f"{last.at_s:.1f}s", _shortened(_during(report, first.at_s, last.at_s)),
                      _shortened(first.detail))
    return table


def _shortened(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _evidence_table(report: Report, limit: int = 40):
    """Each message the audit found wrong: where it was acknowledged, where it is, and what replaced it."""
    table = Table(title="messages not where they were acknowledged")
    for column in ("message", "problem", "acknowledged at", "when", "during", "read back at", "now at that offset"):
        table.add_column(column)
    for item in report.evidence[:limit]:
        acked = f"{item.ack.partition}/{item.ack.offset}" if item.ack else "never"
        when = f"{item.ack.at_s:.2f}s" if item.ack else "-"
        during = _during(report, item.ack.at_s, item.ack.at_s) if item.ack else "-"
        found = ", ".join(f"{p}/{o}" for p, o in item.found) or "nowhere"
        table.add_row(item.value, item.problem, acked, when, during, found, item.at_acknowledged_offset or "-")
    if len(report.evidence) > limit:
        table.caption = f"{len(report.evidence) - limit} more not shown"
    return table


def _summary(report: Report) -> list[str]:
    failed = ", ".join(f"{count} {name}" for name, count in report.failed.items()) or "none"
    lines = [
        f"{report.sent} sent, {report.acknowledged} acknowledged, failed sends: {failed}",
        f"lost {len(report.lost)}, duplicated {len(report.duplicated)}, at another offset {len(report.misplaced)}, "
        f"out of order {len(report.reordered)}; {len(report.unacknowledged_present)} unacknowledged but written",
        f"longest unavailability {report.longest_unavailable_s:.2f}s (producer request.timeout.ms "
        f"{PRODUCER_REQUEST_TIMEOUT_MS}); {report.acknowledged_after_last_heal} acknowledged after the last "
        "fault was healed",
    ]
    if not report.in_sync_at_end:
        lines.append(f"warning: not every replica of {report.topic} was back in sync before the read-back")
    for partition, (position, end) in sorted(report.unread.items()):
        lines.append(f"partition {partition}: read only up to offset {position} of {end}")
    written = report.unacknowledged_present
    if written:
        lines.append(f"unacknowledged but written: {', '.join(written[:20])}{' ...' if len(written) > 20 else ''}")
    return lines


def _creation_summary(report: Report) -> list[str]:
    audit = report.creations
    if audit is None:
        return []
    lines = [f"topic creations: {audit.attempted} asked for, {len(audit.acknowledged)} acknowledged, "
             f"{audit.failed} answered with an error, {len(audit.missing)} acknowledged but missing"]
    if audit.missing:
        lines.append("missing: " + ", ".join(f"{name} (acknowledged at {audit.acknowledged[name]:.2f}s, "
                                             f"during {_during(report, audit.acknowledged[name], audit.acknowledged[name])})"
                                             for name in audit.missing[:20]))
    return lines


def _group_summary(report: Report) -> list[str]:
    group = report.group
    if group is None:
        return []
    lines = [f"group {group.group} ({group.members} members, {group.strategy}): {group.reads} reads, "
             f"{len(group.undelivered)} acknowledged messages never read, {len(group.phantom)} reads the log "
             f"does not hold, {len(group.committed_past_end)} commits past the log's end"]
    if group.undelivered:
        lines.append(f"never read: {', '.join(group.undelivered[:20])}{' ...' if len(group.undelivered) > 20 else ''}")
    for read in group.phantom[:20]:
        lines.append(f"member {read.member} read {read.value!r} at {read.partition}/{read.offset}, "
                     "which the log does not hold there")
    for partition, offset, end in group.committed_past_end[:20]:
        lines.append(f"partition {partition}: offset {offset} committed, past the log's end {end}")
    if not group.caught_up:
        lines.append("the group did not read every partition to its end in time")
    behind = {p: (group.final_committed.get(p), end) for p, end in group.ends.items()
              if group.final_committed.get(p) != end}
    if behind:
        lines.append("final committed offsets not at the end (allowed): " + ", ".join(
            f"{p}: {committed} of {end}" for p, (committed, end) in sorted(behind.items())))
    return lines


def _cluster_errors(report: Report, limit: int = 20) -> list[str]:
    lines = [f"logged at ERROR: {line}" for line in report.cluster_errors[:limit]]
    if len(report.cluster_errors) > limit:
        lines.append(f"... and {len(report.cluster_errors) - limit} more ERROR lines")
    return lines


def _transaction_problem_table(report: Report, audit: TransactionAudit, limit: int = 40):
    """Each transaction a read_committed reader sees wrong: its outcome, where it wrote, what is read."""
    table = Table(title="transactions not as their outcome says")
    for column in ("transaction", "outcome", "problem", "begun", "ended", "during", "written to", "read at"):
        table.add_column(column)
    for item in audit.problems[:limit]:
        ended = f"{item.ended_s:.2f}s" if item.ended_s is not None else "-"
        during = _during(report, item.begun_s, item.ended_s or report.duration_s) if item.begun_s is not None else "-"
        written = ", ".join(f"{t}/{p}" for t, p in item.expected)
        found = ", ".join(f"{t}/{p}@{o}" for t, p, o in item.found) or "nowhere"
        table.add_row(item.transaction, item.outcome, item.problem, f"{item.begun_s:.2f}s", ended,
                      _shortened(during), _shortened(written), _shortened(found))
    if len(audit.problems) > limit:
        table.caption = f"{len(audit.problems) - limit} more not shown"
    return table


def _transaction_summary(report: Report) -> list[str]:
    audit = report.transactions
    if audit is None:
        return []
    lines = [
        f"transactions of {audit.writers} transactional ids over {' and '.join(audit.topics)}: {audit.transactions} "
        f"begun, {audit.committed} committed, {audit.aborted_on_purpose} aborted on purpose, "
        f"{audit.aborted_after_error} aborted after an error, {audit.unknown} with an unknown outcome "
        f"({audit.unknown_present} of them present)",
        f"read_committed: {audit.records_read} records; committed lost {audit.count('lost')}, "
        f"partly visible {audit.count('partly visible')}, duplicated {audit.count('duplicated')}, "
        f"misplaced {audit.count('misplaced')}, out of order {audit.count('out of order')}; "
        f"aborted but visible {audit.count('aborted but visible')}; {len(audit.strangers)} records no writer wrote",
    ]
    if audit.longest_stall:
        writer, start, end = audit.longest_stall
        lines.append(f"longest time a transactional id ended no transaction: {end - start:.2f}s ({writer}, "
                     f"{start:.1f}s to {end:.1f}s, during {_during(report, start, end)})")
    for topic, partition in audit.undecided:
        lines.append(f"{topic}/{partition}: its last stable offset never reached its high watermark "
                     "(a transaction left undecided)")
    for (topic, partition), (position, end) in sorted(audit.unread.items()):
        lines.append(f"{topic}/{partition}: read only up to offset {position} of {end}")
    if audit.strangers:
        lines.append(f"read, but written by no writer: {', '.join(audit.strangers[:20])}")
    return lines

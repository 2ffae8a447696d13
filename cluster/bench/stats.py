"""What the benches read off a process and a list of samples: CPU and RSS from /proc, percentiles.

Every bench, `kraftwerk bench`'s and the development ones in benchmarks/, takes these figures
from here, so that a p99 or a CPU figure means the same thing in each of them. This module
imports nothing of ours: `benchmarks.ab` sends its source along to the commit it measures, which
may predate it.
"""
from __future__ import annotations

import os
import statistics

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def user_and_kernel_cpu(pid: int) -> tuple[float, float]:
    """Seconds of CPU the process has used so far, in user space and in the kernel."""
    with open(f"/proc/{pid}/stat") as stat:
        # The command name, in parentheses, may hold spaces: the fields are counted after it.
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS  # utime, stime


def cpu_seconds(pid: int) -> float:
    """Seconds of CPU the process has used so far, user space and kernel together."""
    return sum(user_and_kernel_cpu(pid))


def rss_mb(pid: int) -> float:
    """The process's resident memory in MB (VmRSS), NaN if the kernel does not say."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def percentile(ordered: list[float], fraction: float) -> float:
    """The sample that `fraction` of the sorted samples `ordered` are at or below (0.99 for p99)."""
    return ordered[max(0, min(len(ordered), int(len(ordered) * fraction)) - 1)]


def spread(samples: list[float]) -> dict[str, float]:
    """p50 (the median), p90, p99 and max of samples, in the samples' unit."""
    ordered = sorted(samples)
    return {"p50": statistics.median(ordered), "p90": percentile(ordered, 0.90),
            "p99": percentile(ordered, 0.99), "max": ordered[-1]}

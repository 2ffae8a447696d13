"""The timeline bench lines up marks by the client's writes (benchmarks.timeline)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks.timeline import critical_path, pin_apart, read_marks, step_offsets, steps_of_writes


def write_marks(path, marks):
    path.write_text("".join(f"{at} {step}\n" for at, step in marks))


def test_each_step_is_timed_from_its_writes_start_and_counted_in_order(tmp_path):
    write_marks(tmp_path / "101.timeline", [(900, "request read"), (2_000, "request read"),
                                            (3_000, "produce appended"), (9_000, "request read"),
                                            (11_000, "request read"), (12_500, "produce appended")])
    write_marks(tmp_path / "102.timeline", [(4_000, "follower got answer"), (5_000, "follower sent fetch")])
    write_marks(tmp_path / "103.timeline", [(4_500, "follower got answer")])
    write_marks(tmp_path / "104.timeline", [(4_200, "controller step")])  # neither leader nor follower
    leader, followers = read_marks(str(tmp_path))
    assert [step for _, step in followers] == ["follower got answer", "follower got answer", "follower sent fetch"]
    offsets = step_offsets(steps_of_writes([(1_000, 8_000), (10_000, 13_000)], leader, followers))
    assert offsets[("leader", "request read", 1)] == [1.0, 1.0]
    assert offsets[("leader", "produce appended", 1)] == [2.0, 2.5]
    assert offsets[("followers", "follower got answer", 2)] == [3.5]
    assert offsets[("client", "delivery reported", 1)] == [7.0, 3.0]
    assert ("leader", "request read", 2) not in offsets  # the 900 ns mark came before the first write


def test_the_critical_path_runs_from_each_senders_write_to_the_receivers_next_step(tmp_path):
    write_marks(tmp_path / "1.timeline", [
        (1_100_000, "request read"), (1_200_000, "answer writing"), (1_230_000, "answer writing"),
        (1_260_000, "answer written"), (1_700_000, "request read"), (1_800_000, "request read"),
        (1_900_000, "answer writing"), (1_950_000, "answer written"), (2_000_000, "produce appended")])
    write_marks(tmp_path / "2.timeline", [(1_240_000, "follower got answer"), (1_400_000, "follower sent fetch")])
    write_marks(tmp_path / "3.timeline", [(1_250_000, "follower got answer"), (1_500_000, "follower sent fetch")])
    leader, followers = read_marks(str(tmp_path))
    parts = dict(critical_path(steps_of_writes([(1_000_000, 2_100_000)], leader, followers)))
    assert parts == {
        "hop: the Produce to the leader": 100,
        "leader, until it writes the second follower's answer": 130,
        "hop: the second follower starting on its answer": 20,  # before the leader's write returned
        "that follower, until it sends its next Fetch": 250,
        "hop: that Fetch read by the leader": 300,
        "leader, until it writes the Produce answer": 100,
        "hop: the answer to the client": 200,
    }


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning apart needs two CPUs")
def test_pinning_apart_gives_one_process_the_first_cpu_and_the_others_the_rest():
    cpus = sorted(os.sched_getaffinity(0))
    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    try:
        pin_apart(children[0].pid, [child.pid for child in children])
        assert os.sched_getaffinity(children[0].pid) == {cpus[0]}
        assert os.sched_getaffinity(children[1].pid) == set(cpus[1:])
    finally:
        for child in children:
            child.kill()
            child.wait()

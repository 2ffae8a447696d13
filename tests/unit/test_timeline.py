"""The timeline bench lines up marks by the client's writes (cluster.bench_timeline)."""
from __future__ import annotations

from cluster.bench_timeline import read_marks, step_offsets


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
    offsets = step_offsets([(1_000, 8_000), (10_000, 13_000)], leader, followers)
    assert offsets[("leader", "request read", 1)] == [1.0, 1.0]
    assert offsets[("leader", "produce appended", 1)] == [2.0, 2.5]
    assert offsets[("followers", "follower got answer", 2)] == [3.5]
    assert offsets[("client", "delivery reported", 1)] == [7.0, 3.0]
    assert ("leader", "request read", 2) not in offsets  # the 900 ns mark came before the first write

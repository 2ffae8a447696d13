"""node.wire_tuples builds struct arrays as tuples whenever no element sets a tagged field, whatever
fields the version lacks; the byte-for-byte checks live in test_fetch_response.py and
test_produce_response.py."""
from __future__ import annotations

from kafka.protocol.producer import ProduceResponse

from node.wire_tuples import struct_array

Partition = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
ANSWER = {"index": 3, "error_code": 0, "base_offset": 42, "log_append_time_ms": -1, "log_start_offset": 7,
          "record_errors": [], "error_message": None}


def test_fields_a_version_lacks_are_left_out_of_the_tuple():
    assert struct_array(Partition, 2, [ANSWER]) == [(3, 0, 42, -1)]
    assert struct_array(Partition, 0, [ANSWER]) == [(3, 0, 42)]
    assert struct_array(Partition, 8, [ANSWER]) == [(3, 0, 42, -1, 7, [], None)]


def test_a_tagged_field_makes_every_element_a_data_class():
    moved = dict(ANSWER, index=4, current_leader=Partition.LeaderIdAndEpoch(leader_id=2, leader_epoch=9))
    built = struct_array(Partition, 10, [ANSWER, moved])
    assert [type(element) for element in built] == [Partition, Partition]
    assert (built[1].current_leader.leader_id, built[1].current_leader.leader_epoch) == (2, 9)

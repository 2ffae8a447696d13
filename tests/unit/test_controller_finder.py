"""Which controller a node's metadata link tries next, as the quorum's answers and failures come in."""
from cluster.formats.control import ControlError, NotController
from node.metadata_sync import ELECTION_WAIT_S, RECONNECT_DELAY_S, ControllerFinder

QUORUM = [("127.0.0.1", 41000), ("127.0.0.1", 41001), ("127.0.0.1", 41002)]


def test_a_follower_naming_the_leader_sends_the_link_there_at_once():
    finder = ControllerFinder(QUORUM)
    assert finder.move_on(NotController((3002, "127.0.0.1", 41002))) == 0.0
    assert finder.address == ("127.0.0.1", 41002)


def test_without_a_leader_the_next_controller_is_tried_and_a_round_in_vain_pauses():
    finder = ControllerFinder(QUORUM)
    assert finder.move_on(ConnectionRefusedError()) == 0.0  # a dead controller: the next one at once
    assert finder.address == QUORUM[1]
    assert finder.move_on(NotController(None)) == ELECTION_WAIT_S  # an election runs: a moment, then the next
    assert finder.address == QUORUM[2]
    assert finder.move_on(ControlError("control connection lost")) == RECONNECT_DELAY_S  # all three tried
    assert finder.address == QUORUM[0]


def test_a_leader_named_twice_in_a_row_is_not_followed_again_and_the_round_goes_on_after_the_one_that_named_it():
    finder = ControllerFinder(QUORUM)
    finder.move_on(NotController((3001, "127.0.0.1", 41001)))
    assert finder.address == QUORUM[1]
    # The one named is not active either (its news was stale): go round, from the one after it.
    assert finder.move_on(NotController((3002, "127.0.0.1", 41002))) == ELECTION_WAIT_S
    assert finder.address == QUORUM[2]
    assert finder.move_on(NotController((3000, "127.0.0.1", 41000))) == 0.0
    assert finder.address == QUORUM[0]


def test_a_leader_listening_on_every_interface_is_reached_at_the_host_that_named_it():
    finder = ControllerFinder([("10.0.0.5", 9093)])
    finder.move_on(NotController((3001, "0.0.0.0", 9094)))
    assert finder.address == ("10.0.0.5", 9094)


def test_only_a_lost_link_or_an_unreachable_controller_is_an_outage():
    assert not ControllerFinder.outage_begins(NotController(None), was_registered=False)  # an election at start
    assert not ControllerFinder.outage_begins(NotController((3001, "h", 1)), was_registered=False)
    assert ControllerFinder.outage_begins(NotController((3001, "h", 1)), was_registered=True)  # a failover
    assert ControllerFinder.outage_begins(ConnectionRefusedError(), was_registered=False)


def test_a_single_controller_is_tried_again_after_the_pause():
    finder = ControllerFinder([("127.0.0.1", 41000)])
    assert finder.move_on(ControlError("the control connection closed")) == RECONNECT_DELAY_S
    assert finder.address == ("127.0.0.1", 41000)

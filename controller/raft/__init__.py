"""KRaft's Raft for the controller quorum, as a pure state machine (not yet wired into the
controller process): `replica.RaftReplica` takes messages and ticks and returns messages, writing
through a `log.RaftLog` and a `election_state.QuorumStateStore`."""

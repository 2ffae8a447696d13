"""A transactional request that comes while the id's last transaction is still completing waits for it, briefly."""
from __future__ import annotations

import asyncio

from node.transactions.coordinator import TransactionCoordinator
from node.transactions.state import COMPLETE_COMMIT, ONGOING, PREPARE_COMMIT, TransactionMetadata


def coordinator_with(metadata: TransactionMetadata) -> TransactionCoordinator:
    coordinator = TransactionCoordinator.__new__(TransactionCoordinator)  # (only its ids are needed here)
    coordinator.transactions = {metadata.transactional_id: metadata}
    return coordinator


def test_a_request_waits_until_the_prepared_transaction_is_complete():
    async def scenario():
        metadata = TransactionMetadata("orders-app", 0, 7, 0, 60_000, state=PREPARE_COMMIT)
        waiting = asyncio.create_task(coordinator_with(metadata)._settled("orders-app", timeout_s=5))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        metadata.pending = True  # the CompleteCommit record being written
        metadata.wake()
        await asyncio.sleep(0.01)
        assert not waiting.done()
        metadata.pending, metadata.state = False, COMPLETE_COMMIT
        metadata.wake()
        await asyncio.wait_for(waiting, 1)
        assert metadata.settle_waiters == []

    asyncio.run(scenario())


def test_the_wait_is_bounded_and_ends_when_the_id_moves_away():
    async def scenario():
        loop = asyncio.get_running_loop()
        metadata = TransactionMetadata("orders-app", 0, 7, 0, 60_000, state=PREPARE_COMMIT)
        coordinator = coordinator_with(metadata)
        started = loop.time()
        await coordinator._settled("orders-app", timeout_s=0.05)
        assert 0.05 <= loop.time() - started < 1 and metadata.state == PREPARE_COMMIT

        waiting = asyncio.create_task(coordinator._settled("orders-app", timeout_s=5))
        await asyncio.sleep(0.01)
        del coordinator.transactions["orders-app"]  # its __transaction_state partition was unloaded
        metadata.wake()
        await asyncio.wait_for(waiting, 1)

        settled = TransactionMetadata("other-app", 1, 8, 0, 60_000, state=ONGOING)
        started = loop.time()
        await coordinator_with(settled)._settled("other-app")
        assert loop.time() - started < 0.01  # nothing under way: no wait at all

    asyncio.run(scenario())

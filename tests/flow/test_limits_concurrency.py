"""Concurrency limits under concurrent claimers: threads, each on its own database connection,
claiming a limited type over a few partitions and ending what they claimed every way an attempt
ends (complete, fail, release), as fast as they can. No claim may lose a deadlock (40P01, which
the slot bookkeeping used to hit when two claims took or gave back slots in different orders),
and no partition ever runs more than its limit. The rated claim, whose start slots are taken the
same way, is raced too."""

from __future__ import annotations

import random
import threading
import time

import pytest

from runnerq_django.storage import limits
from tests.flow import handlers
from tests.flow.racing import claimer, deadlocks
from tests.worker.support import fetch

pytestmark = pytest.mark.django_db(transaction=True)

Q = "flow_race"
MAX_RUNNING = 4
PARTITIONS = 20
ACTIVITIES = 3000
CLAIMERS = 8
SECONDS = 60.0


def claim_limited(rng: random.Random, worker_id: str) -> list:
    return limits.claim_limited(
        Q, "flow.per_key", MAX_RUNNING, limit=rng.randint(1, 32), lease_ms=60000, worker_id=worker_id
    )


def claim_rated(rng: random.Random, worker_id: str) -> list:
    """The rated claim of the same type and partitions: 8 starts per 50 ms window per partition."""
    return limits.claim_rated(
        Q, "flow.per_key", 8, 0.05, limit=rng.randint(1, 32), lease_ms=60000, worker_id=worker_id
    )


@pytest.mark.parametrize("claim", [claim_limited, claim_rated], ids=["concurrency", "rate"])
def test_concurrent_claimers_never_deadlock_and_never_pass_the_limit(claim):
    handlers.per_key.enqueue_many(
        [{"seconds": 0, "key": f"k{i % PARTITIONS}"} for i in range(ACTIVITIES)], queue=Q, retry_delay=0
    )
    before = deadlocks()
    done = threading.Event()
    errors: list = []
    peaks: list = []
    claimed: list = []
    threads = [
        threading.Thread(target=claimer, args=(Q, claim, seed, done, errors, peaks, claimed))
        for seed in range(CLAIMERS)
    ]
    for thread in threads:
        thread.start()
    done.wait(SECONDS)
    done.set()
    for thread in threads:
        thread.join(30)
    time.sleep(0.6)  # the claimers' backends report their statistics as they exit
    assert errors == []  # a deadlock victim raises Conflict (40P01) from the claim
    assert deadlocks() - before == 0
    if claim is claim_limited:
        assert peaks and max(peaks) <= MAX_RUNNING
    assert fetch(
        "SELECT count(*) FROM runnerq_activities WHERE queue_name = %s AND status IN ('pending', 'retrying')",
        [Q],
    ) == [(0,)]  # drained: every slot given back was taken again
    assert len(claimed) >= ACTIVITIES

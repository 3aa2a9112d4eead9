"""This process's rows in ``runnerq_worker_pools``: one per served queue, registered at start,
touched on every heartbeat (and registered again if a long outage got them pruned), deleted on a
clean stop."""

from __future__ import annotations

import logging
import uuid

from runnerq_django.logs import log_event
from runnerq_django.storage import pools

logger = logging.getLogger("runnerq_django.worker")


class PoolRegistration:
    def __init__(self, queues: list[str], *, max_workers: int, activity_types: list[str] | None, alias: str):
        self.alias = alias
        self.max_workers = max_workers
        self.activity_types = activity_types
        self.pool_ids = {queue: uuid.uuid4() for queue in queues}

    def register(self) -> None:
        for queue, pool_id in self.pool_ids.items():
            pools.register(pool_id, queue, self.max_workers, self.activity_types, using=self.alias)

    def beat(self) -> None:
        alive = pools.heartbeat(self.pool_ids.values(), using=self.alias)
        for queue, pool_id in self.pool_ids.items():
            if pool_id not in alive:
                log_event(
                    logger,
                    logging.INFO,
                    "runnerq.pool.reregistered",
                    "The pool row %(pool_id)s of queue %(queue)r was gone (pruned as stale?): registered it again.",
                    queue=queue,
                    pool_id=str(pool_id),
                )
                pools.register(pool_id, queue, self.max_workers, self.activity_types, using=self.alias)

    def deregister(self) -> None:
        pools.deregister(self.pool_ids.values(), using=self.alias)

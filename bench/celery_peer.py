"""Celery with a Redis broker, as a peer of ours and the floor's in ``bench/throughput.py``.

A Celery app whose one task, ``started_at``, notes ``time.time()`` as it starts and pushes it to
Redis under the task's id (``RPUSH``; the benchmark waits with ``BLPOP``), so Celery's
enqueue-to-start latency is sampled the same way as ours and the floor's, in turn with them
(``bench/throughput.py``'s ``sample_in_turn``): from just before ``apply_async`` and from its
return. No result backend: the task ignores its result.

The worker is a real ``celery worker`` process, started as a latency-minded user would run it:

    celery -A bench.celery_peer worker --pool threads --concurrency 8 --prefetch-multiplier 4 \
        --without-gossip --without-mingle --without-heartbeat --queues rq_bench_celery

- **threads**: one process whose consumer takes the message from Redis (``BRPOP``) and hands it
  to a thread, the shape of our latency worker (one process, 8 threads). Celery's docs
  ("Concurrency") recommend its default, prefork, for most uses and say nothing of latency; on
  this machine, in four paired runs (100 and 300 samples, load average under 1), prefork's p50
  was 0.2-1.1 ms higher and its p95 0.4-1.9 ms higher (its parent hands each message to a child
  process over a pipe), so the peer is Celery's faster pool here. ``--celery-pool prefork`` in ``bench/throughput.py`` runs the
  default instead.
- **8** threads, the concurrency of our latency worker.
- **prefetch multiplier 4**, the default, which the "Optimizing" guide says to raise, not lower,
  for "lots of short tasks" when round-trip latency matters; it does not change an idle worker's
  latency (one message at a time).
- **acks early** (the default, ``task_acks_late=False``): the message is acknowledged before the
  task runs, so a task lost in a crash is not re-delivered, and no result is stored; ours keeps
  a lease and a result row for every activity. Celery does less per task here, not more.
- **without gossip, mingle and heartbeat**: no other worker to talk to; remote control stays on,
  since readiness is an ``app.control.ping`` to this worker's node name.

``burn_down`` is the context for our burn-down: ``n`` no-ops published on one connection, then
drained by a worker started after (``bench/throughput.py`` runs prefork with ``--processes``
children), its rate from the first task's start to the last's.

The broker is ``RQ_BENCH_CELERY_BROKER`` (default ``redis://127.0.0.1:6379/0``); the benchmark
flushes its db before and after. Stopped with SIGTERM (Celery's warm shutdown), then SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from celery import Celery

REPO = Path(__file__).resolve().parent.parent
BROKER_ENV = "RQ_BENCH_CELERY_BROKER"
DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
QUEUE = "rq_bench_celery"
NODE = "rq_bench_celery@%h"
STARTED_KEY = "rq_bench_celery:started:"
BURN_KEY = "rq_bench_celery:burn"
POOL = "threads"
CONCURRENCY = 8
PREFETCH_MULTIPLIER = 4

app = Celery("bench.celery_peer", broker=os.environ.get(BROKER_ENV, DEFAULT_BROKER))
app.conf.update(
    task_default_queue=QUEUE,
    task_ignore_result=True,
    task_acks_late=False,
    task_serializer="json",
    accept_content=["json"],
    worker_prefetch_multiplier=PREFETCH_MULTIPLIER,
    worker_hijack_root_logger=False,
    worker_send_task_events=False,
    broker_connection_retry_on_startup=True,
)

_clients: dict[int, object] = {}  # per process: a prefork child makes its own after the fork


def _redis():
    import redis

    client = _clients.get(os.getpid())
    if client is None:
        client = _clients[os.getpid()] = redis.Redis.from_url(app.conf.broker_url)
    return client


@app.task(name="bench.celery.started_at", bind=True)
def started_at(self) -> None:
    began = time.time()
    _redis().rpush(STARTED_KEY + self.request.id, repr(began))


@app.task(name="bench.celery.noop")
def noop() -> None:
    _redis().rpush(BURN_KEY, repr(time.time()))


def configure(broker: str) -> None:
    """Point this process's app at ``broker`` (before its first connection)."""
    app.conf.broker_url = broker
    _clients.clear()


def unavailable(broker: str) -> str | None:
    """Why Celery cannot run here (no redis client, or Redis not answering at ``broker``), or None."""
    try:
        import redis
    except ImportError as error:
        return f"the redis client is not importable ({error})"
    try:
        redis.Redis.from_url(broker, socket_connect_timeout=2, socket_timeout=2).ping()
    except redis.RedisError as error:
        return f"Redis at {broker} did not answer ({error})"
    return None


def flush() -> None:
    _redis().flushdb()


def start_worker(
    broker: str,
    pool: str = POOL,
    concurrency: int = CONCURRENCY,
    prefetch_multiplier: int = PREFETCH_MULTIPLIER,
    timeout: float = 60,
) -> subprocess.Popen:
    """A ``celery worker`` process on ``QUEUE``, returned once it answers a ping."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "bench.celery_peer",
            "worker",
            "--pool",
            pool,
            "--concurrency",
            str(concurrency),
            "--prefetch-multiplier",
            str(prefetch_multiplier),
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--queues",
            QUEUE,
            "--hostname",
            NODE,
            "--loglevel",
            "WARNING",
        ],
        cwd=REPO,
        env={
            **os.environ,
            BROKER_ENV: broker,
            "PYTHONPATH": str(REPO),
            "PYTHONUNBUFFERED": "1",
            "PYTHONWARNINGS": "ignore:You're running the worker with superuser privileges",
        },
        stdout=subprocess.DEVNULL,  # its banner; warnings and errors go to stderr
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the Celery worker exited with {proc.returncode} before it was ready")
        if app.control.ping([NODE.replace("%h", socket.gethostname())], timeout=0.5):
            return proc
    stop_worker(proc)
    raise SystemExit(f"the Celery worker did not answer a ping within {timeout}s")


def stop_worker(proc: subprocess.Popen) -> None:
    if proc.poll() is None:  # the main process only: it stops its pool's children itself
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def enqueue() -> str:
    return started_at.apply_async(queue=QUEUE).id


def wait_started(task_id: str, timeout: float = 60) -> float:
    """The ``time.time()`` the task ``task_id`` noted as it started, once it has."""
    popped = _redis().blpop([STARTED_KEY + task_id], timeout=timeout)
    if popped is None:
        raise SystemExit(f"Celery task {task_id} did not start within {timeout}s")
    return float(popped[1])


@contextlib.contextmanager
def latency_side(broker: str, pool: str = POOL):
    """An idle Celery worker to sample enqueue-to-start from (bench/throughput.py samples it in
    turn with the floor's and ours): ``(enqueue, wait_started, setup)``. Flushes the broker's db
    before and after."""
    configure(broker)
    flush()
    setup = describe(broker, pool)
    proc = start_worker(broker, pool)
    try:
        yield enqueue, wait_started, setup
    finally:
        stop_worker(proc)
        flush()


def describe(
    broker: str, pool: str, concurrency: int = CONCURRENCY, prefetch_multiplier: int = PREFETCH_MULTIPLIER
) -> str:
    """Celery's and the Redis server's versions, and the worker's settings, for the printout."""
    import celery
    from kombu.utils.url import maybe_sanitize_url

    redis_version = _redis().info("server")["redis_version"]
    return (
        f"Celery {celery.__version__}, Redis {redis_version} broker at {maybe_sanitize_url(broker)}; "
        f"worker: --pool {pool} --concurrency {concurrency}, prefetch multiplier {prefetch_multiplier}, acks early, "
        "no result backend, without gossip, mingle and heartbeat"
    )


def burn_down(
    broker: str, n: int, pool: str, concurrency: int, prefetch_multiplier: int, timeout: float = 900
):
    """``n`` no-ops published on one connection, then drained by a worker started after: n / (last
    start - first start), so the worker's start-up is not counted; and the setup it ran with.
    Flushes the broker's db before and after."""
    configure(broker)
    flush()
    setup = describe(broker, pool, concurrency, prefetch_multiplier)
    try:
        with app.producer_or_acquire() as producer:
            for _ in range(n):
                noop.apply_async(queue=QUEUE, producer=producer)
        proc = start_worker(broker, pool, concurrency, prefetch_multiplier)
        try:
            deadline = time.monotonic() + timeout
            while _redis().llen(BURN_KEY) < n:
                if proc.poll() is not None:
                    raise SystemExit(f"the Celery worker exited with {proc.returncode} during the burn-down")
                if time.monotonic() > deadline:
                    raise SystemExit(f"Celery's burn-down did not finish in {timeout}s")
                time.sleep(0.25)
        finally:
            stop_worker(proc)
        starts = [float(value) for value in _redis().lrange(BURN_KEY, 0, -1)]
        return n / (max(starts) - min(starts)), setup
    finally:
        flush()

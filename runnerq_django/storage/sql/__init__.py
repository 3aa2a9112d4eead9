"""The catalogue of SQL: every statement the package runs, by name, one module per subject, each
statement with a line above it saying what it is. Only the storage layer imports these modules;
the operations beside them (``storage.submit``, ``storage.attempts``, ``storage.reads`` ...) run them.

- ``common``: statuses, the input a claim reads, the next attempt count, the results row, waking
  waiters, notifications
- ``submit``: creating activities (a batch, a root, a uniform batch), their events
- ``keys``: idempotency keys and their holders
- ``windows``: debounce and throttle windows (the app's ``runnerq_debounce``), a debounce's move
- ``claims``: the claim of one, listed or many types, its filters and bounds
- ``leases``: renewal, release, and the reaper of expired leases
- ``completions``: acks, waking their waiters, failures
- ``durable``: checkpoints, dependencies, park, signals, results
- ``progress``: progress and published events (the app's own tables): the fenced write, the reads
- ``fork``: re-running a root from a step: its steps, the copied checkpoints, the ledger
- ``deploy``: the deploy check's reads (unfinished work per type, waiting parents, canvases, versions)
- ``pauses``: paused queues and types, and their ledger
- ``flow_limits``: concurrency and rate limits' claims, partitions, slots and their sweep
- ``pools``: the worker pools' rows
- ``retention``: deleting finished trees and old events
- ``fast_forward``: the test toolkit's claims and due times
- ``commands``: the operator commands and their ledger
- ``reads``: the operator console's reads (admin, runnerq_status, commands, tasks backend)
- ``console``: the live console's per-minute rollups and their reads
- ``periodic``: the periodic scheduler's lease, occurrences and repair counts
- ``schedules``: runtime schedules' change check, row lock and count, LISTEN, django-celery-beat's tables
- ``cache_table``: the table of Django's database cache (the scheduler's records)
- ``session``: session settings, advisory locks, LISTEN, the server and its tables
- ``horizon``: what holds back the database's xmin horizon (sessions, replication slots,
  prepared transactions)

Conventions that matter for speed and correctness:

- Statuses are SQL literals, never bind parameters: the dequeue, processing and retention
  indexes are partial, and the planner can only use a partial index when it can prove the
  predicate from the query text.
- Hot operations are one round trip each: claim and renew one statement, complete two (COMPLETE
  then WAKE, sent as one query: an implicit transaction in autocommit). A data-modifying CTE
  runs atomically on its own in autocommit, so the round trip is the transaction.
- ``pg_notify`` is called in the writing statement, so listeners hear only committed work.
- Times come from the database clock (``now()``), so rows, events and the scenarios' ``$future``
  checks agree whatever the clocks of the workers say. Lease deadlines use ``clock_timestamp()``
  so that a claim made late in a long caller transaction still gets its full lease.
- Parameters are named (``%(name)s``); JSON travels as text and is cast with ``::jsonb``.
"""

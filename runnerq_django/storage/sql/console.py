"""The live console's statements: the per-minute rollups the workers' maintenance loop writes
(``runnerq_console_minutes``, ``runnerq_console_depth``: the app's own tables, no other SDK reads
them), their pruning, and the admin's reads of them.

The rollup reads only what finished in the last few minutes, from indexes: roots from
``idx_runnerq_root_terminal`` (queue, status, completed_at), children from the activities created
in the last ``CHILD_LOOKBACK`` (``idx_runnerq_query_created``, capped). Its cost follows the
throughput, never the size of the activity table; the admin's refresh reads only the rollups.
"""

from __future__ import annotations

from runnerq_django.storage.sql.reads import ID_CHARS

# Enqueue-to-start latency histogram: the upper bounds of the buckets, in milliseconds (bucket
# i counts latencies below LATENCY_BOUNDS_MS[i]; the last bucket, len(LATENCY_BOUNDS_MS), the rest).
LATENCY_BOUNDS_MS: tuple[float, ...] = (
    5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000, 300_000, 1_800_000,
)  # fmt: skip
# The histogram's columns: latency_b0 .. latency_b15, one per bucket.
BUCKET_COLUMNS: tuple[str, ...] = tuple(f"latency_b{i}" for i in range(len(LATENCY_BOUNDS_MS) + 1))
# Children are counted when they finish within this long of their creation (see module doc).
CHILD_LOOKBACK = "15 minutes"
# Children read per rollup at most (the newest first).
CHILD_SCAN_CAP = 50_000

# The ten-minute bins of the day's charts start at multiples of ten minutes from this origin.
BIN_ORIGIN = "timestamptz '2000-01-01'"
# Beside the rows per type (span 1: a minute, span 10: ten minutes), each queue has a row per
# minute and per ten minutes for all its types together: span -1 and -10, activity type ''.
# The charts' series read those, so a refresh reads a row per bin and queue however many types
# there are (5,000 types made the day's chart sum 720,000 rows every 3 seconds). Each type also
# has a row per hour (span 60), which the day's types table reads with the ten-minute rows of
# the window's first, partial hour (a sixth of the rows).
TOTAL_TYPE = ""
# Forget the rollups of queue %(queue)s from minute %(since)s on, and the ten-minute and hourly
# sums from the bins holding it (they are recomputed next).
CLEAR_MINUTES = f"""
DELETE FROM runnerq_console_minutes
 WHERE queue_name = %(queue)s
   AND ((span_minutes IN (1, -1) AND minute >= %(since)s)
        OR (span_minutes IN (10, -10)
            AND minute >= date_bin(interval '10 minutes', %(since)s, {BIN_ORIGIN}))
        OR (span_minutes = 60 AND minute >= date_bin(interval '1 hour', %(since)s, {BIN_ORIGIN})))
"""

# The oldest minute of queue %(queue)s's rows per type, and whether older rollups lack the
# totals or the hourly sums (written before those existed; see ROLLUP_TOTALS). An hour whose
# first minutes were pruned has no hourly row: only the hour after it is asked for.
FIRST_MINUTES = f"""
WITH first AS (
    SELECT LEAST((SELECT min(minute) FROM runnerq_console_minutes WHERE span_minutes = 1 AND queue_name = %(queue)s),
                 (SELECT min(minute) FROM runnerq_console_minutes WHERE span_minutes = 10 AND queue_name = %(queue)s)) AS typed,
           LEAST((SELECT min(minute) FROM runnerq_console_minutes WHERE span_minutes = -1 AND queue_name = %(queue)s),
                 (SELECT min(minute) FROM runnerq_console_minutes WHERE span_minutes = -10 AND queue_name = %(queue)s)) AS totals,
           (SELECT min(minute) FROM runnerq_console_minutes WHERE span_minutes = 60 AND queue_name = %(queue)s) AS hours
)
SELECT typed, typed IS NOT NULL
       AND (totals IS NULL OR typed < totals OR hours IS NULL
            OR hours > date_bin(interval '1 hour', typed, {BIN_ORIGIN}) + interval '1 hour')
  FROM first
"""

# The ten-minute sums of queue %(queue)s from the bin holding minute %(since)s, from its minutes.
ROLLUP_TENS = f"""
INSERT INTO runnerq_console_minutes
    (span_minutes, minute, queue_name, activity_type, completed, failed, dead_lettered,
     latency_count, latency_sum_ms, latency_max_ms, {", ".join(BUCKET_COLUMNS)})
SELECT 10, date_bin(interval '10 minutes', minute, {BIN_ORIGIN}), queue_name, activity_type,
       sum(completed), sum(failed), sum(dead_lettered), sum(latency_count), sum(latency_sum_ms),
       max(latency_max_ms), {", ".join(f"sum({c})" for c in BUCKET_COLUMNS)}
  FROM runnerq_console_minutes
 WHERE span_minutes = 1 AND queue_name = %(queue)s
   AND minute >= date_bin(interval '10 minutes', %(since)s, {BIN_ORIGIN})
 GROUP BY 2, 3, 4
"""

# The sums of a rollup row (what the rollups add up into coarser rows).
_SUMS = f"""sum(completed), sum(failed), sum(dead_lettered), sum(latency_count), sum(latency_sum_ms),
       max(latency_max_ms), {", ".join(f"sum({c})" for c in BUCKET_COLUMNS)}"""
# A rollup row that exists already takes the new sums.
_UPSERT = f"""ON CONFLICT (span_minutes, minute, queue_name, activity_type) DO UPDATE
   SET {", ".join(f"{c} = excluded.{c}" for c in ("completed", "failed", "dead_lettered", "latency_count", "latency_sum_ms", "latency_max_ms", *BUCKET_COLUMNS))}"""
# The columns of a rollup row, in the order the rollups insert them.
_COLUMNS = f"""(span_minutes, minute, queue_name, activity_type, completed, failed, dead_lettered,
     latency_count, latency_sum_ms, latency_max_ms, {", ".join(BUCKET_COLUMNS)})"""

# What the rollup derives from queue %(queue)s's rows per type, from the bins holding minute
# %(derived_since)s (%(since)s, or the oldest rollup when older ones lack them): its totals
# (span -1 and -10, see TOTAL_TYPE), then (ROLLUP_HOURS) the hourly sums per type (span 60,
# from the ten-minute rows). Upserts: the recent bins were cleared, older ones are filled in.
ROLLUP_TOTALS = f"""
INSERT INTO runnerq_console_minutes {_COLUMNS}
SELECT -span_minutes, minute, queue_name, '{TOTAL_TYPE}', {_SUMS}
  FROM runnerq_console_minutes
 WHERE span_minutes IN (1, 10) AND queue_name = %(queue)s
   AND minute >= date_bin(interval '10 minutes', %(derived_since)s, {BIN_ORIGIN})
 GROUP BY span_minutes, minute, queue_name
{_UPSERT}
"""
# (ROLLUP_TOTALS above says what this one derives.)
ROLLUP_HOURS = f"""
INSERT INTO runnerq_console_minutes {_COLUMNS}
SELECT 60, date_bin(interval '1 hour', minute, {BIN_ORIGIN}), queue_name, activity_type, {_SUMS}
  FROM runnerq_console_minutes
 WHERE span_minutes = 10 AND queue_name = %(queue)s
   AND minute >= date_bin(interval '1 hour', %(derived_since)s, {BIN_ORIGIN})
 GROUP BY 2, 3, 4
{_UPSERT}
"""

# Per minute and type of queue %(queue)s, from minute %(since)s on: completed, failed and
# dead-lettered activities, and the enqueue-to-start latency of their last attempt (start minus
# due time) as a count, a sum, a maximum and a histogram over %(bounds)s (a column per bucket).
# Roots exactly; children created in the last CHILD_LOOKBACK, capped. The rows are counted by
# (minute, type, status, bucket) first, one aggregate step a row, and those few groups are then
# spread into the columns: the 19 filtered counts evaluated on every row took 4-5 us a row, the
# most of a rollup (about 100 ms for 20,000 rows, and a row is rolled up about 12 times).
ROLLUP_MINUTES = f"""
WITH children AS (
    SELECT activity_type, status, completed_at, started_at, scheduled_at, created_at
      FROM runnerq_activities
     WHERE created_at >= %(since)s::timestamptz - interval '{CHILD_LOOKBACK}'
       AND queue_name = %(queue)s AND parent_activity_id IS NOT NULL
     ORDER BY created_at DESC, id DESC LIMIT {CHILD_SCAN_CAP}
),
finished AS (
    SELECT activity_type, status, completed_at, started_at, COALESCE(scheduled_at, created_at) AS due_at
      FROM runnerq_activities
     WHERE queue_name = %(queue)s AND parent_activity_id IS NULL
       AND status IN ('completed', 'failed', 'dead_letter') AND completed_at >= %(since)s
    UNION ALL
    SELECT activity_type, status, completed_at, started_at, COALESCE(scheduled_at, created_at)
      FROM children
     WHERE status IN ('completed', 'failed', 'dead_letter') AND completed_at >= %(since)s
),
measured AS (
    SELECT date_trunc('minute', completed_at) AS minute, activity_type, status,
           CASE WHEN started_at IS NOT NULL AND started_at > '-infinity' AND started_at < 'infinity'
                     AND due_at > '-infinity' AND due_at < 'infinity'
                THEN GREATEST(0, extract(epoch FROM started_at - due_at) * 1000) END AS latency_ms
      FROM finished
     WHERE completed_at < 'infinity'
),
bucketed AS (
    SELECT *, width_bucket(latency_ms, %(bounds)s::float8[]) AS bucket FROM measured
),
grouped AS (
    SELECT minute, activity_type, status, bucket, count(*) AS n, count(latency_ms) AS latency_count,
           sum(latency_ms) AS latency_sum, max(latency_ms) AS latency_max
      FROM bucketed
     GROUP BY minute, activity_type, status, bucket
)
INSERT INTO runnerq_console_minutes
    (minute, queue_name, activity_type, completed, failed, dead_lettered,
     latency_count, latency_sum_ms, latency_max_ms, {", ".join(BUCKET_COLUMNS)})
SELECT minute, %(queue)s, activity_type,
       COALESCE(sum(n) FILTER (WHERE status = 'completed'), 0),
       COALESCE(sum(n) FILTER (WHERE status = 'failed'), 0),
       COALESCE(sum(n) FILTER (WHERE status = 'dead_letter'), 0),
       sum(latency_count), COALESCE(sum(latency_sum), 0), COALESCE(max(latency_max), 0),
       {", ".join(f"COALESCE(sum(n) FILTER (WHERE bucket = {i}), 0)" for i in range(len(BUCKET_COLUMNS)))}
  FROM grouped
 GROUP BY minute, activity_type
"""

# The queue depth of %(queue)s now, as this minute's sample (a later sample in the same minute
# replaces it): due and scheduled runnable work and running work, each counted up to %(cap)s
# rows from the dequeue and processing indexes.
SAMPLE_DEPTH = """
INSERT INTO runnerq_console_depth (minute, queue_name, due, scheduled, processing, sampled_at)
SELECT date_trunc('minute', now()), %(queue)s,
       (SELECT count(*) FROM (SELECT 1 FROM runnerq_activities a
                               WHERE a.queue_name = %(queue)s
                                 AND a.status IN ('pending', 'scheduled', 'retrying', 'waiting')
                                 AND (a.status = 'pending' OR a.scheduled_at <= now())
                               LIMIT %(cap)s) d),
       (SELECT count(*) FROM (SELECT 1 FROM runnerq_activities a
                               WHERE a.queue_name = %(queue)s
                                 AND a.status IN ('pending', 'scheduled', 'retrying', 'waiting')
                                 AND NOT (a.status = 'pending' OR a.scheduled_at <= now())
                               LIMIT %(cap)s) s),
       (SELECT count(*) FROM (SELECT 1 FROM runnerq_activities a
                               WHERE a.queue_name = %(queue)s AND a.status = 'processing'
                               LIMIT %(cap)s) p),
       now()
ON CONFLICT (minute, queue_name) DO UPDATE
   SET due = excluded.due, scheduled = excluded.scheduled, processing = excluded.processing,
       sampled_at = excluded.sampled_at
"""

# Rollups older than %(keep)s seconds go (the minutes' primary key leads with the minute).
PRUNE_MINUTES = """
DELETE FROM runnerq_console_minutes WHERE minute < now() - make_interval(secs => %(keep)s)
"""
# Depth samples older than %(keep)s seconds go.
PRUNE_DEPTH = """
DELETE FROM runnerq_console_depth WHERE minute < now() - make_interval(secs => %(keep)s)
"""

# -- the admin's reads: the rollups since %(since)s (a range of the primary key), in bins of
# %(step)s, within queue %(queue)s when it is not NULL -------------------------------------------


# The series, from the queues' totals (span -%(span)s, see TOTAL_TYPE: a row per bin and queue):
# per bin of %(step)s (rows with per_queue false) and per queue over the whole window (per_queue
# true), the outcome counts, the latency count, sum and maximum, and the histogram's buckets.
OUTCOMES = f"""
SELECT GROUPING(queue_name) = 0 AS per_queue, t, queue_name,
       sum(completed), sum(failed), sum(dead_lettered), sum(latency_count), sum(latency_sum_ms),
       max(latency_max_ms), {", ".join(f"sum({c})" for c in BUCKET_COLUMNS)}
  FROM (SELECT date_bin(%(step)s::interval, minute, {BIN_ORIGIN}) AS t, *
          FROM runnerq_console_minutes
         WHERE span_minutes = -%(span)s AND minute >= %(since)s
           AND (%(queue)s::text IS NULL OR queue_name = %(queue)s)) w
 GROUP BY GROUPING SETS ((t), (queue_name))
 ORDER BY 1, 2, 3
"""

# The window's types folded in the query: the %(shown)s types with the most failures (failed
# and dead-lettered), then the highest mean latency, each with its counts and its histogram;
# the rest summed into one row (shown false, queue and type NULL, no histogram: the caller has
# the totals) with the number of types in it. The window is read in its coarsest rows: rows of
# span %(span)s minutes up to the first bin of %(coarse)s minutes starting in it, rows of that
# span from there on (the hour's window: 15 rows a type, not 60; the day's: 30, not 144).
# Ranking needs only six sums a type (its 16 bucket sums would double the work); the histograms
# of the shown types are read by primary key, one probe per (type, row), so no sort spills to
# disk and the answer is a few dozen rows (types cut to 512 characters, like every id the
# console shows).
TYPES = f"""
WITH edge AS (
    SELECT date_bin(make_interval(mins => %(coarse)s), %(since)s::timestamptz - interval '1 microsecond',
                    {BIN_ORIGIN}) + make_interval(mins => %(coarse)s) AS at
),
keys AS (
    SELECT ARRAY(SELECT m FROM generate_series(date_bin(make_interval(mins => %(span)s), %(since)s::timestamptz,
                                                        {BIN_ORIGIN}),
                                               (SELECT at FROM edge), make_interval(mins => %(span)s)) m
                  WHERE m >= %(since)s AND m < (SELECT at FROM edge)) AS fine,
           ARRAY(SELECT generate_series((SELECT at FROM edge), now(), make_interval(mins => %(coarse)s))) AS coarse
),
per_type AS (
    SELECT queue_name, activity_type, sum(completed) AS completed, sum(failed) AS failed,
           sum(dead_lettered) AS dead_lettered, sum(latency_count) AS latency_count,
           sum(latency_sum_ms) AS latency_sum_ms, max(latency_max_ms) AS latency_max_ms
      FROM (SELECT * FROM runnerq_console_minutes
             WHERE span_minutes = %(span)s AND minute >= %(since)s AND minute < (SELECT at FROM edge)
               AND (%(queue)s::text IS NULL OR queue_name = %(queue)s)
            UNION ALL
            SELECT * FROM runnerq_console_minutes
             WHERE span_minutes = %(coarse)s AND minute >= (SELECT at FROM edge)
               AND (%(queue)s::text IS NULL OR queue_name = %(queue)s)) w
     GROUP BY queue_name, activity_type
),
ranked AS (
    SELECT *, row_number() OVER (ORDER BY failed + dead_lettered DESC,
                                          latency_sum_ms / NULLIF(latency_count, 0) DESC NULLS LAST,
                                          queue_name, activity_type) <= %(shown)s AS shown
      FROM per_type
),
folded AS (
    SELECT shown, CASE WHEN shown THEN queue_name END AS queue_name,
           CASE WHEN shown THEN activity_type END AS activity_type, count(*) AS types,
           sum(completed) AS completed, sum(failed) AS failed, sum(dead_lettered) AS dead_lettered,
           sum(latency_count) AS latency_count, sum(latency_sum_ms) AS latency_sum_ms,
           max(latency_max_ms) AS latency_max_ms
      FROM ranked
     GROUP BY 1, 2, 3
)
SELECT f.shown, f.queue_name, left(f.activity_type, {ID_CHARS}), f.types, f.completed, f.failed,
       f.dead_lettered, f.latency_count, f.latency_sum_ms, f.latency_max_ms, h.*
  FROM folded f
  LEFT JOIN LATERAL (
        SELECT {", ".join(f"sum({c})" for c in BUCKET_COLUMNS)}
          FROM (SELECT * FROM runnerq_console_minutes m
                 WHERE m.span_minutes = %(span)s AND m.minute = ANY ((SELECT fine FROM keys)::timestamptz[])
                   AND m.queue_name = f.queue_name AND m.activity_type = f.activity_type
                UNION ALL
                SELECT * FROM runnerq_console_minutes m
                 WHERE m.span_minutes = %(coarse)s AND m.minute = ANY ((SELECT coarse FROM keys)::timestamptz[])
                   AND m.queue_name = f.queue_name AND m.activity_type = f.activity_type) r
         WHERE f.shown) h ON true
 ORDER BY f.shown, f.queue_name, f.activity_type
"""

# Per bin: the depth (the largest sample of the bin per queue, summed over the queues).
DEPTH_SERIES = f"""
SELECT t, sum(due), sum(scheduled), sum(processing)
  FROM (SELECT date_bin(%(step)s::interval, minute, {BIN_ORIGIN}) AS t, queue_name,
               max(due) AS due, max(scheduled) AS scheduled, max(processing) AS processing
          FROM runnerq_console_depth
         WHERE minute >= %(since)s AND (%(queue)s::text IS NULL OR queue_name = %(queue)s)
         GROUP BY 1, 2) per_queue
 GROUP BY t
 ORDER BY t
"""

# The claims held now, per queue and worker (the claim token without its random suffix, cut to
# 512 characters like every id the console shows), from idx_runnerq_processing: at most
# %(cap)s running activities are read.
LIVE_CLAIMS = f"""
SELECT queue_name, left(regexp_replace(current_worker_id, ':[0-9a-f]{{32}}$', ''), {ID_CHARS}) AS worker, count(*),
       min(CASE WHEN isfinite(started_at) THEN started_at END)
  FROM (SELECT queue_name, current_worker_id, started_at FROM runnerq_activities
         WHERE status = 'processing' LIMIT %(cap)s) running
 GROUP BY 1, 2
 ORDER BY 3 DESC, 1, 2
 LIMIT 200
"""

"""Batch runs (``storage.batches``): the app's own table ``runnerq_batch_runs``, one row per call
of a batch handler naming its members and the attempt each ran (a Go or TypeScript worker
neither reads nor needs it). Deleted with its members' trees by retention and ``delete_tree``.
"""

from __future__ import annotations

# One call of a batch handler: batch %(batch)s of type %(type)s on queue %(queue)s, its members
# %(ids)s and the attempt each ran %(attempts)s (same order).
RECORD = """
INSERT INTO runnerq_batch_runs (batch_id, activity_type, queue_name, started_at, member_ids, member_attempts)
VALUES (%(batch)s, %(type)s, %(queue)s, now(), %(ids)s::uuid[], %(attempts)s::integer[])
ON CONFLICT (batch_id) DO NOTHING
"""

# The batch calls activity %(id)s was a member of, newest first, at most %(calls)s: (batch id,
# type, queue, started_at, the attempt it ran, member count, the other members (at most
# %(members)s, each with its attempt), as [id, attempt] pairs in a JSON array). Through the GIN
# index on member_ids.
BATCHES_OF = """
SELECT b.batch_id, b.activity_type, b.queue_name, b.started_at,
       b.member_attempts[array_position(b.member_ids, %(id)s::uuid)],
       cardinality(b.member_ids),
       (SELECT COALESCE(json_agg(json_build_array(m.id, m.attempt) ORDER BY m.n), '[]')::text
          FROM (SELECT m.id, m.attempt, m.n
                  FROM unnest(b.member_ids, b.member_attempts) WITH ORDINALITY AS m(id, attempt, n)
                 WHERE m.id <> %(id)s::uuid
                 ORDER BY m.n LIMIT %(members)s) m)
  FROM runnerq_batch_runs b
 WHERE b.member_ids @> ARRAY[%(id)s::uuid]
 ORDER BY b.started_at DESC, b.batch_id
 LIMIT %(calls)s
"""

# The batch rows of the deleted activities %(doomed)s whose other members are all gone (or go
# in the same statement): a clause of the retention and delete_tree statements, where ``{ids}``
# is the sub-select of the ids they delete.
DELETE_FOR_TREES = """
    DELETE FROM runnerq_batch_runs b
     WHERE b.member_ids && ARRAY({ids})
       AND NOT EXISTS (
           SELECT 1 FROM runnerq_activities a
            WHERE a.id = ANY (b.member_ids) AND a.id NOT IN ({ids}))
"""

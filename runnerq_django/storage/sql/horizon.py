"""The xmin horizon's statements: what holds back what vacuum may remove on this database.

A row version that died after the oldest snapshot still in use can't be removed, by vacuum, by a
page's pruning or by an index scan's hints: the dequeue index keeps an entry for every activity
claimed since, and each claim walks them. The holders read here are the ones that count for the
activity tables (PostgreSQL 14 and later, ``GetOldestNonRemovableTransactionId``): the sessions
of this database with a snapshot (``backend_xmin``) or a transaction id (``backend_xid``), the
WAL senders (a standby's ``hot_standby_feedback``), the replication slots' ``xmin`` (a slot's
``catalog_xmin`` holds only the system catalogues) and this database's prepared transactions.

``pg_stat_activity`` shows any role a session's ``backend_xmin`` and ``backend_xid``, but another
role's session's state and times only to a superuser or a member of ``pg_read_all_stats``: such a
holder is listed with its age in transactions, the state ``hidden`` and no time, and counted
(``HIDDEN_SESSIONS``).
"""

from __future__ import annotations

# The %(limit)s oldest holders, oldest (in transaction ids) first: kind ('session',
# 'replication_slot', 'prepared'), the age of what it holds in transaction ids, the age of its
# transaction in seconds (NULL for a slot), its pid (a session's, a slot's active WAL sender's),
# its name (a session's application_name, a slot's name, a prepared transaction's gid), its
# state (a session's, 'hidden' when this role may not read it; 'active'/'inactive' for a slot;
# 'prepared'), its role and its backend type.
HOLDERS = """
SELECT kind, xid_age, seconds, pid, name, state, role, backend_type
  FROM (SELECT 'session' AS kind,
               GREATEST(age(backend_xmin), age(backend_xid)) AS xid_age,
               extract(epoch FROM clock_timestamp() - COALESCE(xact_start, backend_start))::float8 AS seconds,
               pid, application_name AS name,
               COALESCE(state, CASE WHEN query = '<insufficient privilege>' THEN 'hidden' END) AS state,
               usename::text AS role, backend_type
          FROM pg_stat_activity
         WHERE (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
           AND pid <> pg_backend_pid()
           AND (datname = current_database() OR backend_type = 'walsender')
        UNION ALL
        SELECT 'replication_slot', age(xmin), NULL, active_pid, slot_name::text,
               CASE WHEN active THEN 'active' ELSE 'inactive' END, NULL, slot_type
          FROM pg_replication_slots
         WHERE xmin IS NOT NULL
        UNION ALL
        SELECT 'prepared', age(transaction),
               extract(epoch FROM clock_timestamp() - prepared)::float8, NULL, gid, 'prepared',
               owner::text, NULL
          FROM pg_prepared_xacts
         WHERE database = current_database()) holders
 ORDER BY xid_age DESC, seconds DESC NULLS LAST
 LIMIT %(limit)s
"""

# The sessions of this database whose state this role may not read (their snapshot is hidden).
HIDDEN_SESSIONS = """
SELECT count(*) FROM pg_stat_activity
 WHERE datname = current_database() AND query = '<insufficient privilege>'
"""

"""How the tests empty the tables after a transactional test: DELETE, not TRUNCATE.

pytest-django empties the database after every transactional test with Django's ``flush``, one
``TRUNCATE`` of every table. On PostgreSQL a TRUNCATE gives each table a new file (created, and
the old one unlinked, at commit): 0.2-0.5 s per test on the CI machine, after most of the
suite's tests. A DELETE of the same few rows takes milliseconds and leaves the same state: the
tables empty, sequences not reset (``flush`` in tests does not reset them either), no triggers to
fire (runnerq_schedules' only announce the change, NOTIFY) and the foreign keys (Django's, all DEFERRABLE INITIALLY
DEFERRED) checked at commit, when every table is empty.

A table that holds many rows (a planner test's backlog) is truncated instead: deleting them would
take longer than the TRUNCATE and leave the next test planning on a table full of dead rows. It is
truncated with CASCADE, which reaches no table Django's own TRUNCATE would have left alone: that
names every table, or cascades itself when it names only some. A flush that resets sequences is
left to Django's TRUNCATE ... RESTART IDENTITY.
"""

from __future__ import annotations

import pytest

# Rows above which a table is truncated rather than deleted from.
TRUNCATE_ABOVE_ROWS = 10_000

FLUSH_BY_DELETE = """
DO $flush$
DECLARE
    tbl text;
    head_rows bigint;
    bulky text[] := '{{}}';
    small text[] := '{{}}';
BEGIN
    FOREACH tbl IN ARRAY ARRAY[{tables}]::text[] LOOP
        EXECUTE format('SELECT count(*) FROM (SELECT FROM %I LIMIT %s) head', tbl, {threshold} + 1)
            INTO head_rows;
        IF head_rows > {threshold} THEN
            bulky := bulky || tbl;
        ELSE
            small := small || tbl;
        END IF;
    END LOOP;
    IF cardinality(bulky) > 0 THEN
        EXECUTE 'TRUNCATE ' || (SELECT string_agg(format('%I', b), ', ') FROM unnest(bulky) b) || ' CASCADE';
    END IF;
    FOREACH tbl IN ARRAY small LOOP
        EXECUTE format('DELETE FROM %I', tbl);
    END LOOP;
END
$flush$
"""


def flush_statements(original):
    """A ``DatabaseOperations.sql_flush`` deleting instead of truncating (``original`` otherwise)."""

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if not tables or reset_sequences:
            return original(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        names = ", ".join("'" + table.replace("'", "''") + "'" for table in tables)
        return [FLUSH_BY_DELETE.format(tables=names, threshold=TRUNCATE_ABOVE_ROWS)]

    return sql_flush


@pytest.fixture(scope="session", autouse=True)
def flush_by_delete():
    from django.db.backends.postgresql.operations import DatabaseOperations

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatabaseOperations, "sql_flush", flush_statements(DatabaseOperations.sql_flush))
        yield

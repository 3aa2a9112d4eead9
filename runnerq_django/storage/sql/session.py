"""The statements about a database session rather than the RunnerQ tables: settings, locks,
LISTEN, the server's identity and whether the tables exist, by name."""

from __future__ import annotations

# Set this transaction's statement timeout, returning the one it replaces.
SET_STATEMENT_TIMEOUT = (
    "SELECT current_setting('statement_timeout'), set_config('statement_timeout', %s, true)"
)

# Put a transaction's statement timeout back.
RESTORE_STATEMENT_TIMEOUT = "SELECT set_config('statement_timeout', %s, true)"

# Let this session commit without waiting for the WAL flush (the worker's claims and renewals).
RELAX_COMMIT = "SET synchronous_commit TO off"

# Let this session's prepared statements always run their generic plan (the worker's claims).
FORCE_GENERIC_PLANS = "SET plan_cache_mode TO force_generic_plan"

# Never JIT-compile this session's statements (the worker's claims).
NO_JIT = "SET jit TO off"

# Whether this session may JIT-compile its statements.
JIT_ON = "SELECT current_setting('jit')::bool"

# Take a transaction-level advisory lock if no one holds it; whether we got it.
TRY_ADVISORY_LOCK = "SELECT pg_try_advisory_xact_lock(%s)"

# Listen on a channel (composed with the quoted channel name as an identifier).
LISTEN = "LISTEN {}"

# End the driver connection's open transaction.
ROLLBACK = "ROLLBACK"

# The schema tables are created in, and the server's version.
SERVER_AND_SCHEMA = "SELECT current_schema(), current_setting('server_version')"

# Which of the named tables the search path does not have.
MISSING_TABLES = "SELECT name FROM unnest(%s::text[]) AS name WHERE to_regclass(quote_ident(name)) IS NULL"

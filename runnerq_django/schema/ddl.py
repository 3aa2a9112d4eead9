"""The spec's baseline DDL, re-runnable: what ``0001_baseline.sql`` of the RunnerQ SDKs creates.

Every statement is idempotent (``IF NOT EXISTS``, guarded blocks), so it cooperates with a
database another SDK (or an older version) already set up. The indexes are not here: their DDL
is the spec's own text in ``catalog.json`` and ``concurrent_indexes.json`` (``runnerq_django/schema/migrator.py``).

Internal: not part of the public API.
"""

TABLES = """
CREATE TABLE IF NOT EXISTS runnerq_activities (
    id uuid NOT NULL PRIMARY KEY,
    queue_name text NOT NULL,
    activity_type text NOT NULL,
    priority integer NOT NULL DEFAULT 1,
    status text NOT NULL DEFAULT 'pending',
    created_at timestamptz NOT NULL DEFAULT now(),
    scheduled_at timestamptz,
    started_at timestamptz,
    completed_at timestamptz,
    lease_deadline_ms bigint,
    current_worker_id text,
    last_worker_id text,
    retry_count integer NOT NULL DEFAULT 0,
    max_retries integer NOT NULL DEFAULT 0,
    timeout_seconds bigint NOT NULL DEFAULT 300,
    retry_delay_seconds bigint NOT NULL DEFAULT 60,
    max_retry_delay_seconds bigint NOT NULL DEFAULT 0,
    last_error text,
    last_error_at timestamptz,
    metadata jsonb,
    idempotency_key text,
    parent_activity_id uuid,
    root_activity_id uuid,
    depth smallint NOT NULL DEFAULT 0,
    waiting_result_id uuid
);
CREATE TABLE IF NOT EXISTS runnerq_inputs (
    activity_id uuid NOT NULL PRIMARY KEY,
    queue_name text NOT NULL,
    payload jsonb NOT NULL,
    serialization text NOT NULL DEFAULT 'json-v1'
);
CREATE TABLE IF NOT EXISTS runnerq_results (
    activity_id uuid NOT NULL PRIMARY KEY,
    queue_name text NOT NULL,
    state text NOT NULL,
    data jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    owner_activity_id uuid,
    step text,
    serialization text NOT NULL DEFAULT 'json-v1'
);
CREATE TABLE IF NOT EXISTS runnerq_events (
    id bigserial NOT NULL PRIMARY KEY,
    activity_id uuid NOT NULL,
    queue_name text NOT NULL,
    event_type text NOT NULL,
    worker_id text,
    detail jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS runnerq_idempotency (
    queue_name text NOT NULL,
    idempotency_key text NOT NULL,
    activity_id uuid NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, idempotency_key)
);
CREATE TABLE IF NOT EXISTS runnerq_dependencies (
    queue_name text NOT NULL,
    waiter_activity_id uuid NOT NULL,
    result_id uuid NOT NULL,
    producer_activity_id uuid,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, waiter_activity_id, result_id)
);
CREATE TABLE IF NOT EXISTS runnerq_worker_pools (
    pool_id uuid NOT NULL PRIMARY KEY,
    queue_name text NOT NULL,
    max_workers integer NOT NULL,
    activity_types text[],
    started_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS runnerq_commands (
    queue_name text NOT NULL,
    command_id text NOT NULL,
    fingerprint text NOT NULL,
    kind text NOT NULL,
    result jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, command_id)
);
"""

# Columns later spec versions added to tables an older SDK may have created: added if missing.
ADDED_COLUMNS = """
ALTER TABLE runnerq_activities ADD COLUMN IF NOT EXISTS lease_deadline_ms bigint;
ALTER TABLE runnerq_activities ADD COLUMN IF NOT EXISTS current_worker_id text;
ALTER TABLE runnerq_activities ADD COLUMN IF NOT EXISTS last_worker_id text;
ALTER TABLE runnerq_activities ADD COLUMN IF NOT EXISTS max_retry_delay_seconds bigint NOT NULL DEFAULT 0;
ALTER TABLE runnerq_activities ADD COLUMN IF NOT EXISTS metadata jsonb;
ALTER TABLE runnerq_activities ADD COLUMN IF NOT EXISTS idempotency_key text;
ALTER TABLE runnerq_activities ADD COLUMN IF NOT EXISTS parent_activity_id uuid;
ALTER TABLE runnerq_activities ADD COLUMN IF NOT EXISTS root_activity_id uuid;
ALTER TABLE runnerq_activities ADD COLUMN IF NOT EXISTS depth smallint NOT NULL DEFAULT 0;
ALTER TABLE runnerq_activities ADD COLUMN IF NOT EXISTS waiting_result_id uuid;
ALTER TABLE runnerq_inputs ADD COLUMN IF NOT EXISTS serialization text NOT NULL DEFAULT 'json-v1';
ALTER TABLE runnerq_results ADD COLUMN IF NOT EXISTS owner_activity_id uuid;
ALTER TABLE runnerq_results ADD COLUMN IF NOT EXISTS step text;
ALTER TABLE runnerq_results ADD COLUMN IF NOT EXISTS serialization text NOT NULL DEFAULT 'json-v1';
ALTER TABLE runnerq_activities ALTER COLUMN max_retries SET DEFAULT 0;
"""

# The retired payload column moves to runnerq_inputs (absent payloads are JSON null), then goes.
MOVE_RETIRED_PAYLOAD = """
DO $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM information_schema.columns
        WHERE table_schema = current_schema() AND table_name = 'runnerq_activities' AND column_name = 'payload'
    ) THEN
        INSERT INTO runnerq_inputs (activity_id, queue_name, payload, serialization)
        SELECT id, queue_name, COALESCE(payload::jsonb, 'null'::jsonb), 'json-v1' FROM runnerq_activities
        ON CONFLICT (activity_id) DO NOTHING;
        ALTER TABLE runnerq_activities DROP COLUMN payload;
    END IF;
END
$$;
"""

# Lease renewals change only lease_deadline_ms, which no index covers: with free space on each
# page they are HOT updates. Not in catalog.json, but every SDK's migration sets it.
FILLFACTOR = "ALTER TABLE runnerq_activities SET (fillfactor = 85);"
FILLFACTOR_IS_SET = """
SELECT coalesce(reloptions, '{}') @> ARRAY['fillfactor=85'] FROM pg_class WHERE oid = 'runnerq_activities'::regclass
"""

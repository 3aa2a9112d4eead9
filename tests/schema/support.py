"""What the schema tests share: an independent reading of the live catalog, SQL fixture files,
clones of a migrated template database, and fingerprints that show whether DDL touched a table.

The comparison here deliberately does not use ``runnerq_django.schema.compare``: it reads ``pg_catalog``
with queries of its own (``pg_attribute``/``pg_type``/``pg_constraint``/``pg_indexes``) and
compares with the spec's ``catalog.json``, using the normalizers
that ``tests/spec/test_vectors.py`` proves against the spec's vectors. It is also stricter: the
catalog tables must have exactly the catalog's columns and non-primary indexes, nothing more.
"""

from __future__ import annotations

import json
import re
import uuid
from contextlib import contextmanager
from pathlib import Path

import psycopg

from runnerq_django.spec.catalog import normalize_column_default, normalize_index_definition
from tests.helpers import SPEC_DIR, with_dbname

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CATALOG = json.loads((SPEC_DIR / "schema/postgres/catalog.json").read_text())
RETIRED = json.loads((SPEC_DIR / "schema/postgres/retired.json").read_text())
TABLES = sorted(table["name"] for table in CATALOG["tables"])


def catalog_differences(url: str) -> list[str]:
    """Every way the database at ``url`` differs from the spec's catalog (empty: identical)."""
    with psycopg.connect(url, autocommit=True) as conn:
        columns = _columns(conn)
        primary_keys = dict(conn.execute(_PRIMARY_KEYS, [TABLES]).fetchall())
        indexes = {
            name: (definition, valid)
            for name, definition, valid in conn.execute(_INDEXES, [TABLES]).fetchall()
        }
    problems = []
    for table in CATALOG["tables"]:
        name = table["name"]
        live = columns.get(name)
        if live is None:
            problems.append(f"{name}: table missing")
            continue
        want = {column["name"]: column for column in table["columns"]}
        if set(live) != set(want):
            problems.append(f"{name}: columns {sorted(live)} != catalog {sorted(want)}")
        for column_name in set(live) & set(want):
            typname, nullable, default = live[column_name]
            column = want[column_name]
            if typname != column["type"]:
                problems.append(f"{name}.{column_name}: type {typname} != {column['type']}")
            if nullable != column["nullable"]:
                problems.append(f"{name}.{column_name}: nullable {nullable} != {column['nullable']}")
            if normalize_column_default(default) != normalize_column_default(column["default"]):
                problems.append(f"{name}.{column_name}: default {default!r} != {column['default']!r}")
        if primary_keys.get(name) != table["primary_key"]:
            problems.append(f"{name}: primary key {primary_keys.get(name)} != {table['primary_key']}")
    want_indexes = {index["name"]: index for index in CATALOG["indexes"]}
    if set(indexes) != set(want_indexes):
        problems.append(
            f"non-primary indexes: extra {sorted(set(indexes) - set(want_indexes))}, "
            f"missing {sorted(set(want_indexes) - set(indexes))}"
        )
    for name in set(indexes) & set(want_indexes):
        definition, valid = indexes[name]
        if not valid:
            problems.append(f"{name}: invalid")
        if normalize_index_definition(definition) != normalize_index_definition(
            want_indexes[name]["definition"]
        ):
            problems.append(f"{name}: definition {definition!r} != {want_indexes[name]['definition']!r}")
    return problems


def retired_objects(url: str) -> list[str]:
    """Retired columns and indexes still present, by the spec's retired.json and catalog.json."""
    names = {index["name"] for index in RETIRED["indexes"]} | set(CATALOG["retired"]["indexes"])
    with psycopg.connect(url, autocommit=True) as conn:
        found = [
            row[0]
            for row in conn.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relkind = 'i' AND c.relname = ANY(%s)",
                [sorted(names)],
            )
        ]
        for qualified in {column["name"] for column in RETIRED["columns"]} | set(
            CATALOG["retired"]["columns"]
        ):
            table, column = qualified.split(".")
            if conn.execute(
                "SELECT 1 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relname = %s AND a.attname = %s AND NOT a.attisdropped",
                [table, column],
            ).fetchone():
                found.append(qualified)
    return sorted(found)


def fillfactor(url: str) -> str | None:
    with psycopg.connect(url, autocommit=True) as conn:
        options = conn.execute(
            "SELECT reloptions FROM pg_class WHERE oid = 'runnerq_activities'::regclass"
        ).fetchone()[0]
    return next((o.split("=", 1)[1] for o in options or [] if o.startswith("fillfactor=")), None)


def relation_fingerprint(url: str) -> dict[str, tuple]:
    """``(oid, relfilenode, xmin of the pg_class row)`` of every catalog table and its indexes:
    any DDL on them (ALTER, CREATE/DROP INDEX, SET fillfactor) changes at least one of these."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            """
            SELECT c.relname, c.oid::int8, c.relfilenode::int8, c.xmin::text::int8
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = current_schema()
              AND (c.relname = ANY(%(tables)s)
                   OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid IN (
                       SELECT oid FROM pg_class WHERE relname = ANY(%(tables)s) AND relnamespace = n.oid)))
            """,
            {"tables": TABLES},
        ).fetchall()
    return {name: tuple(rest) for name, *rest in rows}


def run_sql_file(url: str, name: str) -> None:
    """Run a fixture file statement by statement in autocommit (``;`` ends a statement at the end
    of a line), as psql would, so CREATE INDEX CONCURRENTLY works."""
    text = re.sub(r"^--.*$", "", (FIXTURES / name).read_text(), flags=re.M)
    statements = [s.strip() for s in re.split(r";\s*$", text, flags=re.M) if s.strip()]
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


@contextmanager
def clone_of(server_url: str, template: str):
    """A new database copied from ``template`` (a migrated database nobody is connected to)."""
    name = f"rq_clone_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    try:
        yield with_dbname(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _columns(conn) -> dict[str, dict[str, tuple[str, bool, str | None]]]:
    rows = conn.execute(
        """
        SELECT c.relname, a.attname, t.typname, NOT a.attnotnull, pg_get_expr(d.adbin, d.adrelid)
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid AND c.relkind = 'r'
        JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = current_schema()
        JOIN pg_type t ON t.oid = a.atttypid
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE a.attnum > 0 AND NOT a.attisdropped AND c.relname = ANY(%s)
        """,
        [TABLES],
    ).fetchall()
    columns: dict[str, dict] = {}
    for table, column, typname, nullable, default in rows:
        columns.setdefault(table, {})[column] = (typname, nullable, default)
    return columns


_PRIMARY_KEYS = """
SELECT c.relname,
       array(SELECT a.attname FROM unnest(k.conkey) WITH ORDINALITY AS u(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.attnum ORDER BY u.ord)
FROM pg_constraint k
JOIN pg_class c ON c.oid = k.conrelid
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = current_schema()
WHERE k.contype = 'p' AND c.relname = ANY(%s)
"""

_INDEXES = """
SELECT x.indexname, x.indexdef, i.indisvalid
FROM pg_indexes x
JOIN pg_class ic ON ic.relname = x.indexname
JOIN pg_namespace n ON n.oid = ic.relnamespace AND n.nspname = x.schemaname
JOIN pg_index i ON i.indexrelid = ic.oid
WHERE x.schemaname = current_schema() AND x.tablename = ANY(%s) AND NOT i.indisprimary
"""

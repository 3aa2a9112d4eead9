"""Compare a live database with the spec's ``catalog.json`` (SPEC.md section (a), validation rules).

Reads only ``information_schema`` and ``pg_catalog``, takes no lock, and reports every difference
as one line of text: an empty list means the database is exactly what the spec describes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runnerq_django.spec.catalog import load, normalize_column_default, normalize_index_definition

FILLFACTOR = 85


@dataclass
class LiveCatalog:
    columns: dict[str, dict[str, tuple[str, bool, str | None]]] = field(default_factory=dict)
    primary_keys: dict[str, list[str]] = field(default_factory=dict)
    indexes: dict[str, tuple[str, str, bool]] = field(default_factory=dict)  # name -> (table, def, valid)
    activities_reloptions: list[str] = field(default_factory=list)


def read_live_catalog(cursor) -> LiveCatalog:
    """The RunnerQ part of the current schema (``search_path``), as the catalog describes it."""
    live = LiveCatalog()
    cursor.execute(
        """
        SELECT table_name, column_name, udt_name, is_nullable = 'YES', column_default
        FROM information_schema.columns
        WHERE table_schema = current_schema() AND table_name LIKE 'runnerq\\_%'
        """
    )
    for table, column, udt, nullable, default in cursor.fetchall():
        live.columns.setdefault(table, {})[column] = (udt, nullable, default)
    cursor.execute(
        """
        SELECT c.relname, a.attname
        FROM pg_index i
        JOIN pg_class c ON c.oid = i.indrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
        WHERE i.indisprimary AND n.nspname = current_schema() AND c.relname LIKE 'runnerq\\_%'
        ORDER BY c.relname, k.ord
        """
    )
    for table, column in cursor.fetchall():
        live.primary_keys.setdefault(table, []).append(column)
    cursor.execute(
        """
        SELECT ic.relname, tc.relname, pg_get_indexdef(i.indexrelid), i.indisvalid
        FROM pg_index i
        JOIN pg_class ic ON ic.oid = i.indexrelid
        JOIN pg_class tc ON tc.oid = i.indrelid
        JOIN pg_namespace n ON n.oid = tc.relnamespace
        WHERE NOT i.indisprimary AND n.nspname = current_schema() AND tc.relname LIKE 'runnerq\\_%'
        """
    )
    for name, table, definition, valid in cursor.fetchall():
        live.indexes[name] = (table, definition, valid)
    cursor.execute(
        """
        SELECT coalesce(c.reloptions, '{}') FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relname = 'runnerq_activities' AND c.relkind = 'r'
        """
    )
    row = cursor.fetchone()
    live.activities_reloptions = list(row[0]) if row else []
    return live


def compare(live: LiveCatalog, *, check_fillfactor: bool = True, tolerate_retired_indexes: bool = False) -> list[str]:
    """Every difference between ``live`` and ``catalog.json``, one human-readable line each."""
    catalog = load("catalog.json")
    problems: list[str] = []
    for table in catalog["tables"]:
        name = table["name"]
        columns = live.columns.get(name)
        if columns is None:
            problems.append(f"table {name}: missing")
            continue
        for column in table["columns"]:
            col = column["name"]
            if col not in columns:
                problems.append(f"column {name}.{col}: missing")
                continue
            udt, nullable, default = columns[col]
            if udt != column["type"]:
                problems.append(f"column {name}.{col}: type {udt}, want {column['type']}")
            if nullable != column["nullable"]:
                want = "NULL" if column["nullable"] else "NOT NULL"
                problems.append(f"column {name}.{col}: nullability differs, want {want}")
            if normalize_column_default(default) != normalize_column_default(column["default"]):
                problems.append(f"column {name}.{col}: default {default!r}, want {column['default']!r}")
        pk = live.primary_keys.get(name, [])
        if pk != table["primary_key"]:
            problems.append(f"table {name}: primary key ({', '.join(pk)}), want ({', '.join(table['primary_key'])})")
    for index in catalog["indexes"]:
        name = index["name"]
        found = live.indexes.get(name)
        if found is None:
            problems.append(f"index {name}: missing")
            continue
        table, definition, valid = found
        if not valid:
            problems.append(f"index {name}: invalid (an interrupted concurrent build)")
        if normalize_index_definition(definition) != normalize_index_definition(index["definition"]):
            problems.append(f"index {name}: definition {definition!r}, want {index['definition']!r}")
    retired = catalog.get("retired", {})
    for qualified in retired.get("columns", []):
        table, _, col = qualified.partition(".")
        if col in live.columns.get(table, {}):
            problems.append(f"column {qualified}: retired, must be migrated away (older SDKs still use it)")
    if not tolerate_retired_indexes:
        for name in retired.get("indexes", []):
            if name in live.indexes:
                problems.append(f"index {name}: retired, must be dropped")
    if check_fillfactor and "runnerq_activities" in live.columns:
        if f"fillfactor={FILLFACTOR}" not in live.activities_reloptions:
            problems.append(f"table runnerq_activities: fillfactor is not {FILLFACTOR} (lease renewals would not be HOT)")
    return problems


def check_connection(connection, **options) -> list[str]:
    with connection.cursor() as cursor:
        return compare(read_live_catalog(cursor), **options)

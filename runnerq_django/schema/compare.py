"""Compare a live database with the spec's ``catalog.json`` (SPEC.md section (a), validation rules).

Reads only ``information_schema`` and ``pg_catalog`` and reports every difference as a
``Difference``: an empty list means the database is what the spec says. It takes no lock beyond
the ACCESS SHARE that ``pg_get_expr``/``pg_get_indexdef`` take briefly to deparse a default or an
index (the lock any ``SELECT`` takes, which conflicts only with ACCESS EXCLUSIVE, i.e. with a
schema change in progress), so it is safe on a busy queue and the migrator's no-DDL fast path
relies on it (``tests/schema/test_no_ddl_fast_path.py`` holds an EXCLUSIVE lock meanwhile).

What is compared, per the spec: for each catalog table, every catalog column's ``udt_name``,
nullability and default (after the ``column_default`` normalizer), and the primary key columns in
order; each catalog index present, valid (not left over from an interrupted concurrent build) and
equal after the ``index_definition`` normalizer; the retired column absent (a database that still
has it is refused: older SDKs are still writing payloads there); retired indexes absent; and
``fillfactor = 85`` on ``runnerq_activities`` (not in the catalog, but set by every SDK's
migration so lease renewals stay HOT). Extra columns, tables and indexes are not differences: a
newer SDK or an operator may add their own.

Internal: not part of the public API.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from runnerq_django.exceptions import RunnerQError
from runnerq_django.spec.catalog import load, normalize_column_default, normalize_index_definition

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.utils import CursorWrapper

FILLFACTOR = 85
ACTIVITIES = "runnerq_activities"


@dataclass(frozen=True)
class Difference:
    """One way the live database differs from the catalog.

    ``tolerable`` marks a leftover retired index: it only costs writes until a migration drops
    it, so a validator may accept it (the spec allows that); everything else is not tolerable.
    """

    subject: str  # e.g. "column runnerq_activities.status", "index idx_runnerq_processing"
    problem: str
    tolerable: bool = False

    def __str__(self) -> str:
        return f"{self.subject}: {self.problem}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LiveCatalog:
    # table -> column -> (udt_name, nullable, column_default)
    columns: dict[str, dict[str, tuple[str, bool, str | None]]] = field(default_factory=dict)
    primary_keys: dict[str, list[str]] = field(default_factory=dict)
    # index name -> (table, pg_get_indexdef, indisvalid)
    indexes: dict[str, tuple[str, str, bool]] = field(default_factory=dict)
    activities_reloptions: list[str] = field(default_factory=list)


def catalog_tables() -> list[str]:
    return [table["name"] for table in load("schema/postgres/catalog.json")["tables"]]


def read_live_catalog(cursor: CursorWrapper) -> LiveCatalog:
    """The catalog tables of the current schema (``search_path``) as ``information_schema`` and
    ``pg_catalog`` describe them. Only catalog reads: no lock on the tables themselves."""
    tables = catalog_tables()
    live = LiveCatalog()
    cursor.execute(
        """
        SELECT table_name, column_name, udt_name, is_nullable = 'YES', column_default
        FROM information_schema.columns
        WHERE table_schema = current_schema() AND table_name = ANY(%s)
        """,
        [tables],
    )
    for table, column, udt, nullable, default in cursor.fetchall():
        live.columns.setdefault(table, {})[column] = (udt, nullable, default)
    cursor.execute(
        """
        SELECT c.relname, a.attname
        FROM pg_index i
        JOIN pg_class c ON c.oid = i.indrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
        WHERE i.indisprimary AND n.nspname = current_schema() AND c.relname = ANY(%s)
        ORDER BY c.relname, k.ord
        """,
        [tables],
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
        WHERE NOT i.indisprimary AND n.nspname = current_schema() AND tc.relname = ANY(%s)
        """,
        [tables],
    )
    for name, table, definition, valid in cursor.fetchall():
        # pg_get_indexdef gives NULL for an index dropped while we read (a concurrent migration).
        if definition is not None:
            live.indexes[name] = (table, definition, valid)
    cursor.execute(
        """
        SELECT coalesce(c.reloptions, '{}') FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relname = %s AND c.relkind IN ('r', 'p')
        """,
        [ACTIVITIES],
    )
    row = cursor.fetchone()
    live.activities_reloptions = list(row[0]) if row else []
    return live


def compare(live: LiveCatalog, *, check_fillfactor: bool = True) -> list[Difference]:
    """Every difference between ``live`` and ``catalog.json``."""
    catalog = load("schema/postgres/catalog.json")
    differences: list[Difference] = []
    for table in catalog["tables"]:
        differences += _table_differences(table, live)
    for index in catalog["indexes"]:
        if index["table"] in live.columns:  # a missing table is one difference, not one per index
            differences += _index_differences(index, live)
    differences += _retired_differences(catalog.get("retired", {}), live)
    if (
        check_fillfactor
        and ACTIVITIES in live.columns
        and f"fillfactor={FILLFACTOR}" not in live.activities_reloptions
    ):
        differences.append(
            Difference(
                f"table {ACTIVITIES}",
                f"fillfactor is not {FILLFACTOR} (reloptions {live.activities_reloptions or 'none'}); "
                "lease renewals would not be HOT updates",
            )
        )
    return differences


def _table_differences(table: dict[str, Any], live: LiveCatalog) -> list[Difference]:
    name = table["name"]
    columns = live.columns.get(name)
    if columns is None:
        return [Difference(f"table {name}", "missing")]
    differences = []
    for column in table["columns"]:
        subject = f"column {name}.{column['name']}"
        if column["name"] not in columns:
            differences.append(Difference(subject, "missing"))
            continue
        udt, nullable, default = columns[column["name"]]
        if udt != column["type"]:
            differences.append(Difference(subject, f"type {udt}, want {column['type']}"))
        if nullable != column["nullable"]:
            have, want = ("NULL", "NOT NULL") if nullable else ("NOT NULL", "NULL")
            differences.append(Difference(subject, f"{have}, want {want}"))
        if normalize_column_default(default) != normalize_column_default(column["default"]):
            differences.append(
                Difference(
                    subject, f"default {_sql_or_none(default)}, want {_sql_or_none(column['default'])}"
                )
            )
    pk = live.primary_keys.get(name, [])
    if pk != table["primary_key"]:
        have = f"({', '.join(pk)})" if pk else "none"
        differences.append(
            Difference(f"table {name}", f"primary key {have}, want ({', '.join(table['primary_key'])})")
        )
    return differences


def _index_differences(index: dict[str, Any], live: LiveCatalog) -> list[Difference]:
    subject = f"index {index['name']}"
    found = live.indexes.get(index["name"])
    if found is None:
        return [Difference(subject, f"missing (on {index['table']})")]
    _table, definition, valid = found
    differences = []
    if not valid:
        differences.append(
            Difference(subject, "invalid: left over from an interrupted CREATE INDEX CONCURRENTLY")
        )
    if normalize_index_definition(definition) != normalize_index_definition(index["definition"]):
        differences.append(Difference(subject, f"definition {definition!r}, want {index['definition']!r}"))
    return differences


def _retired_differences(retired: dict[str, Any], live: LiveCatalog) -> list[Difference]:
    differences = []
    for qualified in retired.get("columns", []):
        table, _, column = qualified.partition(".")
        if column in live.columns.get(table, {}):
            differences.append(
                Difference(
                    f"column {qualified}",
                    "retired but still present: older RunnerQ SDKs may still write to it; "
                    "migrate (manage.py runnerq_schema migrate) moves its data to runnerq_inputs",
                )
            )
    for name in retired.get("indexes", []):
        if name in live.indexes:
            differences.append(
                Difference(
                    f"index {name}",
                    "retired but still present (costs writes; migrate drops it)",
                    tolerable=True,
                )
            )
    return differences


def _sql_or_none(default: str | None) -> str:
    return "none" if default is None else default


def check_connection(connection: BaseDatabaseWrapper, *, check_fillfactor: bool = True) -> list[Difference]:
    """``compare`` for the current schema of a Django database connection."""
    with connection.cursor() as cursor:
        return compare(read_live_catalog(cursor), check_fillfactor=check_fillfactor)


class SchemaMismatch(RunnerQError, RuntimeError):
    """The database still differs from the catalog after the spec's migration procedure ran:
    something the idempotent DDL cannot repair (a column of another type, an index of the same
    name with another definition ...). Nothing is dropped or rewritten to force it: the object
    may belong to another SDK version that shares the database."""

    def __init__(self, differences: list[Difference]):
        self.differences = differences
        lines = "\n  ".join(str(d) for d in differences)
        super().__init__(
            f"the RunnerQ schema differs from the spec's catalog after migrating:\n  {lines}\n"
            "The spec's migration creates what is missing and drops what is retired; it never changes an "
            "existing column's type, nullability or default, nor an existing index: fix these by hand."
        )

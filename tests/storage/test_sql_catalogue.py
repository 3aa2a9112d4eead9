"""One catalogue of SQL: every statement the package runs is named in the storage layer's SQL
modules, and every name there is used. Reads the package's source with ``ast``; no database."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.helpers import docstring_ids

PACKAGE = Path(__file__).resolve().parents[2] / "runnerq_django"

# The catalogue: a package of modules, one per subject (storage/sql/__init__.py lists them).
CATALOGUE = {path.relative_to(PACKAGE).as_posix() for path in (PACKAGE / "storage" / "sql").glob("*.py")}
# The schema, with its own rules (one DDL source applied by the migrator, catalogue introspection).
EXEMPT = {
    "schema/ddl.py": "the schema's DDL: the tables and indexes the migrator creates",
    "schema/migrator.py": "applies schema/ddl.py under the schema lock, and checks its indexes' state",
    "schema/compare.py": "reads the database's catalogue (information_schema, pg_index) to compare it with the spec",
}
EXEMPT_DIRS = {"migrations": "Django migrations: schema changes, run once by migrate"}

# A string that starts like a statement: an upper-case SQL keyword, as the package writes them.
STATEMENT = re.compile(
    r"\s*\(?\s*(?:(?:SELECT|INSERT\s+INTO|UPDATE\s+\w+|DELETE\s+FROM|WITH(?:\s+RECURSIVE)?\s+\w+(?:\s*\([^)]*\))?\s+AS"
    r"|SET\s+\w+\s+(?:TO|=)|ROLLBACK|BEGIN|COMMIT|CREATE|ALTER|DROP|TRUNCATE|LOCK\s+TABLE|EXPLAIN|VACUUM|ANALYZE"
    r"|SHOW)\b|(?:LISTEN|NOTIFY)\s+\S)"
)


def _sources() -> list[tuple[str, ast.Module]]:
    return [
        (path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(), str(path)))
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def _texts(tree: ast.Module):
    """(line, text) of every string literal but docstrings; an f-string with ``{}`` for its holes."""
    skip = docstring_ids(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip.update(id(part) for part in node.values)
            yield node.lineno, "".join(p.value if isinstance(p, ast.Constant) else "{}" for p in node.values)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node.lineno, node.value


def _exempt(name: str) -> bool:
    return name in CATALOGUE or name in EXEMPT or name.split("/")[0] in EXEMPT_DIRS


def test_the_detector_knows_a_statement_from_prose():
    for statement in (
        "SELECT 1",
        "\n  INSERT INTO t (a) VALUES (1)",
        "(SELECT count(*) FROM t)",
        "UPDATE t SET a = 1",
        "DELETE FROM t",
        "WITH RECURSIVE v(x) AS (SELECT 1) SELECT x FROM v",
        "SET synchronous_commit TO off",
        "LISTEN {}",
        "ROLLBACK",
        "EXPLAIN (FORMAT JSON) ",
    ):
        assert STATEMENT.match(statement), statement
    for prose in ("Delete up to batch trees", "Select a queue", "UPDATES", "status = 'processing'", "WITHIN"):
        assert not STATEMENT.match(prose), prose


def test_every_statement_lives_in_the_storage_catalogue():
    assert len(CATALOGUE) > 10  # the catalogue's modules are found
    assert all((PACKAGE / name).exists() for name in [*CATALOGUE, *EXEMPT])
    offences = [
        f"{name}:{line}: {text.strip().splitlines()[0][:70]}"
        for name, tree in _sources()
        if not _exempt(name)
        for line, text in _texts(tree)
        if STATEMENT.match(text)
    ]
    assert offences == [], "SQL outside the storage layer's SQL modules:\n" + "\n".join(offences)


def _defined(tree: ast.Module) -> dict[str, int]:
    names = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names.update({target.id: node.lineno for target in node.targets if isinstance(target, ast.Name)})
        elif isinstance(node, ast.FunctionDef):
            names[node.name] = node.lineno
    return names


def _uses(tree: ast.Module) -> set[str]:
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            used.update(alias.name for alias in node.names)
    return used


def test_every_named_statement_is_used():
    sources = dict(_sources())
    used = set().union(*(_uses(tree) for name, tree in sources.items()))
    unused = [
        f"{name}:{line} {defined}"
        for name in sorted(CATALOGUE)
        for defined, line in _defined(sources[name]).items()
        if defined not in used
    ]
    assert unused == [], "named in the catalogue but never used:\n" + "\n".join(unused)


def test_every_named_statement_says_what_it_is():
    """A comment line right above each name, or a docstring for a builder function."""
    missing = []
    for name in sorted(CATALOGUE):
        text = (PACKAGE / name).read_text()
        lines, tree = text.splitlines(), ast.parse(text)
        for node in tree.body:
            if isinstance(node, ast.Assign) and not lines[node.lineno - 2].lstrip().startswith("#"):
                missing.append(f"{name}:{node.lineno}")
            elif isinstance(node, ast.FunctionDef) and not ast.get_docstring(node):
                missing.append(f"{name}:{node.lineno} {node.name}()")
    assert missing == []

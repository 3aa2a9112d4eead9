"""The import graph of ``runnerq_django``, read with ``ast`` from every module (imports inside
functions included, since a function-level import that dodges a cycle is still a cycle; imports
under ``if TYPE_CHECKING:`` too, since a type that names a module above is a tie to it all the
same): it has no cycle, the two bottom layers (docs/architecture.md) import nothing above them,
the leaves import nothing of the package but what is listed for them, and only the storage layer
imports its SQL catalogue (``runnerq_django.storage.sql``).

``importlib``'s ``import_module(name)`` (the package root's lazy exports) names no module to
``ast``, and is left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "runnerq_django"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

# What each bottom layer may import (docs/architecture.md, "The layers"): the module itself, or a
# module under one of these prefixes.
ALLOWED = {
    "spec": ("runnerq_django.spec", "runnerq_django.exceptions"),
    # runnerq_django.logs (log_event) imports nothing of the package: a leaf any layer may use.
    "logs": ("runnerq_django.logs",),
    "storage": (
        "runnerq_django.storage",
        "runnerq_django.spec",
        "runnerq_django.exceptions",
        "runnerq_django.logs",
    ),
    # runnerq_django.activities.options (the one declaration of every activity option) reads only the storage
    # layer's bounds, so the decorator, the settings checks and the client may all read it.
    "options": (
        "runnerq_django.activities.options",
        "runnerq_django.storage",
        "runnerq_django.spec",
        "runnerq_django.exceptions",
        "runnerq_django.logs",
    ),
    # The nouns every layer above storage names (the handle, the context's protocol ...): they
    # name storage's records, and nothing above it.
    "nouns": (
        "runnerq_django.activities.nouns",
        "runnerq_django.storage",
        "runnerq_django.spec",
        "runnerq_django.exceptions",
    ),
    "_version": ("runnerq_django._version",),
    "exit_status": ("runnerq_django.worker.exit_status",),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        else:
            stack.extend(ast.iter_child_nodes(node))
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports: ``from a import b`` is ``a.b`` when that is a
    module, else ``a``; and the packages above an imported module, whose ``__init__`` runs first."""
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = name.split(".")
            anchor = anchor if is_package else anchor[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([base] if base else []))
        for alias in node.names:
            full = f"{base}.{alias.name}"
            targets.add(full if full in known else base)
    # Importing a.b.c runs the package a.b's __init__ first (unless the importer is inside a.b,
    # where that already ran): an edge too.
    packages = set()
    for target in targets:
        parts = target.split(".")
        for end in range(2, len(parts)):
            package = ".".join(parts[:end])
            if not (name == package or name.startswith(package + ".")):
                packages.add(package)
    return {target for target in targets | packages if target in known and target != name}


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imports(name, path, known) for name, path in found.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return components


def layer(name: str) -> str | None:
    for key in ALLOWED:
        prefix = f"{PACKAGE}.{key}"
        if name == prefix or name.startswith(prefix + "."):
            return key
    return None


def test_graph_reads_every_module():
    edges = graph()
    # The reader itself: a module known to import another, by each form of import.
    assert "runnerq_django.storage.db" in edges["runnerq_django.storage.attempts"]  # from pkg import mod
    assert "runnerq_django.spec.retry" in edges["runnerq_django.storage.attempts"]  # from pkg.mod import x
    assert (
        "runnerq_django.activities.nouns" in edges["runnerq_django.activities.registry"]
    )  # under if TYPE_CHECKING:
    assert len(edges) > 100


def test_no_import_cycle():
    found = cycles(graph())
    assert not found, "import cycles (each line one set of modules that import each other):\n" + "\n".join(
        " <-> ".join(component) for component in found
    )


def test_bottom_layers_import_nothing_above():
    wrong = [
        f"{name} imports {target}"
        for name, targets in graph().items()
        if (own := layer(name)) is not None
        for target in sorted(targets)
        if not target.startswith(ALLOWED[own])
    ]
    assert not wrong, "\n".join(wrong)


# The SQL catalogue: only the storage layer's operations run its statements.
SQL_CATALOGUE = f"{PACKAGE}.storage.sql"


def test_only_storage_imports_the_sql_catalogue():
    edges = graph()
    assert f"{SQL_CATALOGUE}.reads" in edges[f"{PACKAGE}.storage.reads"]  # the rule sees the catalogue
    wrong = [
        f"{name} imports {target}"
        for name, targets in edges.items()
        if not name.startswith(f"{PACKAGE}.storage.") and name != f"{PACKAGE}.storage"
        for target in sorted(targets)
        if target == SQL_CATALOGUE or target.startswith(SQL_CATALOGUE + ".")
    ]
    assert not wrong, "SQL imported outside the storage layer:\n" + "\n".join(wrong)


# Imports that once ran from a layer up to one above it (docs/architecture.md, "The layers"): the
# plumbing's checks and start-up checks, tracing, and a migration. Each module and what it must
# not import (the module, or anything under it).
NOT_UPWARD = {
    "runnerq_django.checks": ("runnerq_django.scheduler",),
    "runnerq_django.management.preflight": ("runnerq_django.worker.supervisor",),
    "runnerq_django.observability.tracing": (
        "runnerq_django",
        "runnerq_django.worker",
        "runnerq_django.worker.context",
    ),
    "runnerq_django.migrations.0002_scheduler": ("runnerq_django.scheduler",),
}


def test_no_import_runs_back_up():
    def under(target: str, up: str) -> bool:  # the package root stands for itself alone
        return target == up or (up != PACKAGE and target.startswith(up + "."))

    edges = graph()
    wrong = [
        f"{name} imports {target}"
        for name, above in NOT_UPWARD.items()
        for target in sorted(edges[name])
        if any(under(target, up) for up in above)
    ]
    assert not wrong, "\n".join(wrong)


def test_cycle_finder_finds_a_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []

"""The import graph of ``runnerq_django`` against the map in docs/architecture.md ("The map").

The graph is read with ``ast`` from every module: imports inside functions included, since a
function-level import that dodges a cycle is still a cycle; imports under ``if TYPE_CHECKING:``
too, since a type that names a module above is a tie to it all the same. The package is cut into
*rooms*: each subpackage is one, and each top-level module another (``exceptions`` shares the
``spec`` room: the spec's failure format and the error hierarchy name each other's modules). The
rooms stand on floors; a room imports only the rooms the map lists for it, which all stand on a
lower floor, so no import runs upward and no two rooms import each other. No module cycle either,
the leaves import nothing of the package but what is listed for them, and only the storage layer
imports its SQL catalogue (``runnerq_django.storage.sql``).

``importlib``'s ``import_module(name)`` (the package root's lazy exports) names no module to
``ast``, and is left out.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = "runnerq_django"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE
ARCHITECTURE = ROOT.parent / "docs" / "architecture.md"
TOP = "(root)"  # the room of the package's own __init__ (its lazy exports)

# The map, floor by floor from the bottom: each room and the rooms it may import. A room is a
# subpackage or a top-level module of runnerq_django; docs/architecture.md draws the same table.
FLOORS: list[dict[str, tuple[str, ...]]] = [
    {  # 1: leaves
        "spec": (),
        "logs": (),
        "signals": (),
        "_version": (),
    },
    {  # 2: the storage layer, the models, the metrics hook
        "storage": ("logs", "spec"),
        "models": ("spec",),
        "metrics": ("logs",),
    },
    {  # 3: settings, the tables themselves, retry policies
        "conf": ("storage",),
        "schema": ("logs", "models", "spec"),
        "retries": ("spec", "storage"),
    },
    {  # 4: activity types, database routing, LISTEN, the conformance driver, migrations
        "activities": ("conf", "logs", "retries", "spec", "storage"),
        "routing": ("conf", "spec"),
        "listen": ("conf", "logs", "storage"),
        "conformance": ("conf", "logs", "schema", "storage"),
        "migrations": ("models", "schema"),
    },
    {  # 5: tracing, pause/resume, the system checks
        "observability": ("_version", "activities", "conf", "logs", "spec", "storage"),
        "flow": ("activities", "conf", "routing", "storage"),
        "checks": ("conf", "routing", "schema", "storage"),
        "progress": ("activities", "conf", "listen", "logs", "routing", "spec", "storage"),
    },
    {  # 6: the client (enqueue, handles, results, signals, cancel)
        "client": (
            "activities",
            "conf",
            "listen",
            "metrics",
            "models",
            "observability",
            "routing",
            "signals",
            "spec",
            "storage",
        ),
    },
    {  # 7: canvases, the periodic scheduler, re-running a workflow from a step
        "canvas": ("activities", "client", "conf", "models", "spec", "storage"),
        "workflows": ("activities", "client", "models", "routing", "spec", "storage"),
        "scheduler": (
            "activities",
            "checks",
            "client",
            "conf",
            "logs",
            "metrics",
            "models",
            "observability",
            "routing",
            "signals",
            "spec",
            "storage",
        ),
    },
    {  # 8: the worker, the admin's views
        "worker": (
            "activities",
            "canvas",
            "client",
            "conf",
            "listen",
            "logs",
            "metrics",
            "models",
            "observability",
            "progress",
            "retries",
            "routing",
            "scheduler",
            "signals",
            "spec",
            "storage",
        ),
        "admin_views": (
            "activities",
            "client",
            "conf",
            "models",
            "routing",
            "scheduler",
            "spec",
            "storage",
            "workflows",
        ),
    },
    {  # 9: the django.tasks backend, the admin, the commands, the package root
        "tasks_backend": (
            "activities",
            "client",
            "conf",
            "logs",
            "retries",
            "routing",
            "spec",
            "storage",
            "worker",
        ),
        "admin": ("admin_views", "conf", "models", "spec", "storage"),
        "templatetags": ("admin_views",),
        "management": (
            "activities",
            "canvas",
            "client",
            "conf",
            "conformance",
            "logs",
            "metrics",
            "models",
            "routing",
            "scheduler",
            "schema",
            "spec",
            "storage",
            "worker",
            "workflows",
        ),
        TOP: (
            "_version",
            "activities",
            "client",
            "retries",
            "scheduler",
            "spec",
            "storage",
            "worker",
            "workflows",
        ),
    },
    {  # 10: the testing toolkit, the app's start-up
        "testing": (
            TOP,
            "activities",
            "client",
            "conf",
            "models",
            "routing",
            "signals",
            "spec",
            "storage",
            "worker",
        ),
        "apps": (
            "activities",
            "canvas",
            "checks",
            "client",
            "conf",
            "management",
            "progress",
            "scheduler",
            "tasks_backend",
        ),
    },
]
MAP = {room: allowed for floor in FLOORS for room, allowed in floor.items()}
FLOOR = {room: number for number, floor in enumerate(FLOORS, 1) for room in floor}
SHARES = {"exceptions": "spec"}  # a top-level module in another's room

# Leaves, module by module: what each may import (the module itself, or a module under one of
# these prefixes).
LEAVES = {
    # log_event: a leaf any room may use.
    "runnerq_django.logs": ("runnerq_django.logs",),
    # The one declaration of every activity option reads only the storage layer's bounds, so the
    # decorator, the settings checks and the client may all read it.
    "runnerq_django.activities.options": (
        "runnerq_django.activities.options",
        "runnerq_django.storage",
        "runnerq_django.spec",
        "runnerq_django.exceptions",
        "runnerq_django.logs",
    ),
    # The nouns every room above storage names (the handle, the context's protocol ...): they
    # name storage's records, and nothing above it.
    "runnerq_django.activities.nouns": (
        "runnerq_django.activities.nouns",
        "runnerq_django.storage",
        "runnerq_django.spec",
        "runnerq_django.exceptions",
    ),
    "runnerq_django._version": ("runnerq_django._version",),
    "runnerq_django.worker.exit_status": ("runnerq_django.worker.exit_status",),
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


def room(name: str) -> str:
    """The room of a module: its subpackage or its top-level module's name."""
    parts = name.split(".")
    if len(parts) == 1:
        return TOP
    return SHARES.get(parts[1], parts[1])


def test_graph_reads_every_module():
    edges = graph()
    # The reader itself: a module known to import another, by each form of import.
    assert "runnerq_django.storage.db" in edges["runnerq_django.storage.attempts"]  # from pkg import mod
    assert "runnerq_django.spec.retry" in edges["runnerq_django.storage.attempts"]  # from pkg.mod import x
    assert (
        "runnerq_django.activities.nouns" in edges["runnerq_django.activities.registry"]
    )  # under TYPE_CHECKING
    assert "runnerq_django.client" in edges["runnerq_django.worker.context"]  # inside a function
    assert len(edges) > 100


def test_no_import_cycle():
    found = cycles(graph())
    assert not found, "import cycles (each line one set of modules that import each other):\n" + "\n".join(
        " <-> ".join(component) for component in found
    )


def test_every_module_stands_in_a_room_of_the_map():
    unmapped = sorted(name for name in graph() if room(name) not in MAP)
    assert not unmapped, f"modules in no room of the map (add the room to FLOORS and the page): {unmapped}"


def test_the_map_runs_downward_only():
    """A room may import only rooms on a lower floor: no upward import, no two rooms in a loop."""
    wrong = [
        f"{name} (floor {FLOOR[name]}) may import {other} (floor {FLOOR.get(other)})"
        for name, allowed in MAP.items()
        for other in allowed
        if other not in FLOOR or FLOOR[other] >= FLOOR[name]
    ]
    assert not wrong, "\n".join(wrong)


def test_each_room_imports_only_what_the_map_allows():
    wrong = [
        f"{name} imports {target} (room {room(target)!r}, not in the map's list for {room(name)!r})"
        for name, targets in graph().items()
        for target in sorted(targets)
        if room(target) != room(name) and room(target) not in MAP.get(room(name), ())
    ]
    assert not wrong, "\n".join(wrong)


def test_the_map_lists_no_import_that_is_not_made():
    """The map is the tree's, not a wish: each room it lets import another does."""
    made = {(room(name), room(target)) for name, targets in graph().items() for target in targets}
    unused = [
        f"{name} -> {other}"
        for name, allowed in MAP.items()
        for other in allowed
        if (name, other) not in made
    ]
    assert not unused, (
        "the map allows imports no module makes (drop them here and on the page):\n" + "\n".join(unused)
    )


def test_leaves_import_nothing_but_what_is_listed():
    edges = graph()
    wrong = [
        f"{name} imports {target}"
        for name, allowed in LEAVES.items()
        for target in sorted(edges[name])
        if not target.startswith(allowed)
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


# docs/architecture.md's table: one row per room, "| floor | `room` | job | `a`, `b` ... |".
ROW = re.compile(r"^\| (\d+) \| `([^`]+)` \| [^|]+ \| ([^|]*) \|$")


def test_the_architecture_page_draws_this_map():
    drawn = {}
    for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines():
        if match := ROW.match(line):
            floor, name, allowed = match.groups()
            drawn[name] = (int(floor), tuple(sorted(re.findall(r"`([^`]+)`", allowed))))
    expected = {
        (name if name != TOP else "runnerq_django"): (
            FLOOR[name],
            tuple(sorted(other if other != TOP else "runnerq_django" for other in allowed)),
        )
        for name, allowed in MAP.items()
    }
    assert drawn == expected


def test_the_package_keeps_at_most_16_top_level_modules():
    assert len(list(ROOT.glob("*.py"))) <= 16


def test_cycle_finder_finds_a_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []

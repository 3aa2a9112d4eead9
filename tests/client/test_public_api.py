"""The declared public API: which modules a user imports, what they export, and one exception hierarchy.

The list below is the documentation's "Python API" (docs/reference/api/); every other module of
the package says in its docstring (or its package's) that it is internal.
"""

from __future__ import annotations

import ast
import inspect
from importlib import import_module
from pathlib import Path

import pytest

import runnerq_django
from runnerq_django.exceptions import Interrupt, RunnerQError
from runnerq_django.storage import errors

PUBLIC_MODULES = [
    "runnerq_django",
    "runnerq_django.activities.batch",
    "runnerq_django.canvas",
    "runnerq_django.client",
    "runnerq_django.activities.concurrency",
    "runnerq_django.activities.debounce",
    "runnerq_django.worker.context",
    "runnerq_django.exceptions",
    "runnerq_django.flow",
    "runnerq_django.workflows",
    "runnerq_django.workflows.forks",
    "runnerq_django.metrics",
    "runnerq_django.models",
    "runnerq_django.activities.registry",
    "runnerq_django.retries",
    "runnerq_django.routing",
    "runnerq_django.signals",
    "runnerq_django.storage",
    "runnerq_django.storage.commands",
    "runnerq_django.storage.errors",
    "runnerq_django.storage.operations",
    "runnerq_django.storage.types",
    "runnerq_django.tasks_backend",
    "runnerq_django.testing",
    "runnerq_django.activities.versions",
    "runnerq_django.scheduler",
    "runnerq_django.scheduler.celery_beat",
    "runnerq_django.scheduler.declarations",
    "runnerq_django.scheduler.status",
]
INTERNAL_MARK = "not part of the public API"
PACKAGE = Path(runnerq_django.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def _package_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.relative_to(PACKAGE).parts)


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_public_module_declares_all_and_every_declared_name_exists(name):
    module = import_module(name)
    assert isinstance(getattr(module, "__all__", None), (list, tuple)), f"{name} has no __all__"
    assert len(set(module.__all__)) == len(module.__all__), f"{name}.__all__ repeats a name"
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"


def test_every_other_module_says_it_is_internal():
    unmarked = []
    for path in _package_modules():
        name = _module_name(path)
        if name in PUBLIC_MODULES:
            continue
        own_and_parents = [path] + [
            p / "__init__.py" for p in path.parents if p != PACKAGE.parent and p.is_relative_to(PACKAGE)
        ]
        if not any(INTERNAL_MARK in _docstring(p) for p in own_and_parents if p.exists()):
            unmarked.append(name)
    assert not unmarked, f"neither public nor marked internal: {unmarked}"


def test_the_package_roots_lazy_exports_resolve_to_their_defining_modules():
    for name in runnerq_django.__all__:
        value = getattr(runnerq_django, name)
        assert value is getattr(import_module(runnerq_django._EXPORTS[name]), name)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        runnerq_django.Nope  # noqa: B018


def test_no_two_public_classes_share_a_name():
    """``Activity``, ``ClaimLost`` and ``Registry`` each named two different classes once."""
    owners: dict[str, set[str]] = {}
    for module_name in PUBLIC_MODULES:
        module = import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value):
                owners.setdefault(name, set()).add(f"{value.__module__}.{value.__qualname__}")
    assert {name: classes for name, classes in owners.items() if len(classes) > 1} == {}


def test_every_public_error_derives_from_runnerq_error_and_interrupts_stay_outside():
    errors_seen = []
    for module_name in PUBLIC_MODULES:
        module = import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value) and issubclass(value, BaseException):
                errors_seen.append(value)
                if issubclass(value, Interrupt):
                    assert not issubclass(value, Exception), (
                        f"{name}: an interrupt must escape `except Exception`"
                    )
                else:
                    assert issubclass(value, RunnerQError), f"{module_name}.{name} is outside the hierarchy"
    assert errors.ClaimLost in errors_seen and errors.SchemaMissing in errors_seen


def test_storage_errors_are_explicit_classes_one_per_kind():
    for name in errors.__all__:
        value = getattr(errors, name)
        if inspect.isclass(value) and issubclass(value, errors.StorageError):
            assert value.__name__ == name and value.__qualname__ == name  # what a traceback shows
            assert value.__module__ == "runnerq_django.storage.errors"
    assert sorted(errors.BY_KIND) == sorted(errors.ErrorKind)
    for kind, cls in errors.BY_KIND.items():
        assert cls.kind is kind and cls.__bases__ == (errors.StorageError,)
    assert errors.SerializationError("x").kind is errors.ErrorKind.SERIALIZATION

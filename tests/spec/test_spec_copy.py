"""The repository's copy of the spec data (``runnerq_django/spec/data``) and what the wheel ships."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from tests.helpers import REPO, SPEC_DIR

# The reference copy beside the repository in development checkouts and CI; absent in a plain clone.
# RUNNERQ_REFERENCE_SPEC points elsewhere (a git worktree, say, has no ``shared/`` beside it).
REFERENCE = Path(os.environ.get("RUNNERQ_REFERENCE_SPEC", REPO.parent / "shared" / "runnerq-spec"))


def files(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in root.glob("**/*.json")}


def test_the_copy_equals_the_reference_spec_when_it_is_beside_the_repository():
    if not REFERENCE.is_dir():
        pytest.skip(f"no reference spec at {REFERENCE}: comparison with the repository's copy skipped")
    ours, reference = files(SPEC_DIR), files(REFERENCE)
    assert sorted(ours) == sorted(reference)
    assert [name for name in ours if ours[name] != reference[name]] == []


def test_the_wheel_ships_the_files_the_app_reads_at_run_time():
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = {
        str(p.relative_to(SPEC_DIR))
        for pattern in package_data["runnerq_django"]
        if pattern.startswith("spec/data/")
        for p in (REPO / "runnerq_django").glob(pattern)
    }
    assert shipped == {
        "constants/constants.json",
        "schema/postgres/catalog.json",
        "schema/postgres/concurrent_indexes.json",
        "schema/postgres/events.schema.json",
        "schema/postgres/retired.json",
    }

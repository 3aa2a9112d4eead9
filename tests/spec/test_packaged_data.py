"""The spec data files packaged with the app (``runnerq_django/spec/data``) equal the shared spec's."""

from __future__ import annotations

import pytest

from runnerq_django.spec.catalog import DATA_DIR
from tests.helpers import SPEC_DIR

PACKAGED = sorted(p.name for p in DATA_DIR.glob("*.json"))


def test_the_files_the_app_needs_are_packaged():
    assert set(PACKAGED) >= {"catalog.json", "concurrent_indexes.json", "retired.json", "constants.json",
                             "events.schema.json"}


@pytest.mark.parametrize("name", PACKAGED)
def test_packaged_copy_equals_the_shared_spec(name):
    shared = [p for p in SPEC_DIR.glob(f"**/{name}") if "examples" not in p.parts]
    assert len(shared) == 1, f"{name}: expected one shared original, found {shared}"
    assert (DATA_DIR / name).read_bytes() == shared[0].read_bytes()

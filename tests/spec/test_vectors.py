"""Every case of every golden-vector file of the spec, each case its own test id.

The files are read from the repository's copy of the spec data, so a newer spec drop is tested as
soon as it lands; a vector file nobody maps to a function fails the suite.
"""

from __future__ import annotations

import json

import pytest

from runnerq_django.spec import events, keys, retry, serialization, statuses
from runnerq_django.spec.catalog import normalize_column_default, normalize_index_definition
from tests.helpers import SPEC_DIR

# vector file (relative to the spec) -> how to compute the output from a case's input
VECTORS = {
    "vectors/application_key.json": lambda i: keys.application_key(i["stored"], i["activity_type"]),
    "vectors/attempts_remain.json": lambda i: retry.attempts_remain(i["retry_count"], i["max_retries"]),
    "vectors/business_key.json": lambda i: keys.business_key(i["key"], i["activity_type"]),
    "vectors/canonical_event.json": lambda i: events.canonical_event(i["event_type"]),
    "vectors/canonical_status.json": lambda i: statuses.canonical_status(i["status"]),
    "vectors/checkpoint_id.json": lambda i: str(keys.checkpoint_id(i["activity_id"], i["kind"], i["name"])),
    "vectors/column_default.json": lambda i: normalize_column_default(i["default"]),
    "vectors/index_definition.json": lambda i: normalize_index_definition(i["definition"]),
    "vectors/internal_events.json": lambda i: events.internal_events(i["type"]),
    "vectors/retry_delay.json": lambda i: retry.retry_delay(
        i["retry_count"], i["retry_delay_seconds"], i["max_retry_delay_seconds"]
    ),
    "vectors/step_key.json": lambda i: keys.step_key(i["root_id"], i["parent_id"], i["step"]),
    "serialization/vectors/plain_json.json": lambda i: serialization.plain_json(
        i["data"], i["serialization"]
    ),
}


def _cases():
    for relative in sorted(VECTORS):
        for case in json.loads((SPEC_DIR / relative).read_text())["cases"]:
            yield pytest.param(relative, case, id=f"{relative.rsplit('/', 1)[-1][:-5]}: {case['name']}")


@pytest.mark.parametrize(("relative", "case"), list(_cases()))
def test_vector_case(relative, case):
    assert VECTORS[relative](case["input"]) == case["output"]


def test_every_vector_file_is_mapped():
    on_disk = {str(p.relative_to(SPEC_DIR)) for p in SPEC_DIR.glob("**/vectors/*.json")}
    assert on_disk == set(VECTORS)


def test_every_mapped_file_has_cases():
    for relative in VECTORS:
        assert json.loads((SPEC_DIR / relative).read_text())["cases"], relative

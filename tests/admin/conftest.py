from __future__ import annotations

import json

import pytest

from tests.helpers import SPEC_DIR


@pytest.fixture(scope="session")
def event_schema():
    return json.loads((SPEC_DIR / "schema" / "postgres" / "events.schema.json").read_text())


@pytest.fixture
def assert_event_valid(event_schema):
    """Check one stored event against its ``$defs`` entry in the spec's events.schema.json."""
    import jsonschema

    from tests.helpers import format_checker

    def check(event_type: str, detail: dict, worker_id: str | None = None) -> None:
        definition = dict(event_schema["$defs"][event_type])
        definition["$defs"] = event_schema["$defs"]
        jsonschema.validate(detail, definition, format_checker=format_checker())
        if "started_at" in json.dumps(detail):
            assert worker_id, f"{event_type} with started_at needs a worker_id"

    return check

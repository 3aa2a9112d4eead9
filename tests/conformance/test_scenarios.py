"""Every conformance scenario of the spec, on every PostgreSQL server (SPEC.md section (g))."""

from __future__ import annotations

import pytest

from tests.conformance.conftest import SERVER_SLOTS
from tests.conformance.runner import RunnerError, load_scenario, run_scenario
from tests.helpers import SPEC_DIR

SCENARIOS_DIR = SPEC_DIR / "conformance" / "scenarios"
# Discovered recursively and sorted by relative path; each file is validated by its own test.
SCENARIO_FILES = sorted(SCENARIOS_DIR.rglob("*.json"), key=lambda p: p.relative_to(SCENARIOS_DIR).as_posix())


def test_scenarios_are_present():
    assert SCENARIO_FILES, f"no scenario files under {SCENARIOS_DIR}"


@pytest.mark.conformance
@pytest.mark.parametrize("slot", range(len(SERVER_SLOTS)), ids=SERVER_SLOTS)
@pytest.mark.parametrize("path", SCENARIO_FILES, ids=[p.relative_to(SCENARIOS_DIR).as_posix() for p in SCENARIO_FILES])
def test_scenario(path, slot, conformance_servers, conformance_events):
    server = conformance_servers(slot)
    try:
        scenario = load_scenario(path, SCENARIOS_DIR)
    except RunnerError as exc:
        pytest.fail(f"invalid scenario file: {exc}", pytrace=False)
    outcome = run_scenario(scenario, server.drivers, server.dsn, conformance_events)
    if outcome.status == "skipped":
        pytest.skip(outcome.message)
    if outcome.status == "failed":
        pytest.fail(f"[{server.label}] {outcome.message}", pytrace=False)

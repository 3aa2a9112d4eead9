"""Every conformance scenario of the spec, on every PostgreSQL server (SPEC.md section (g)).

``tests/conformance/scenarios`` adds scenarios of our own in the same format, for rules of the
spec that its scenario set doesn't pin (allow_reuse_on_failure, SpawnLinked, the reaper's limit,
the retention pin check ...). They run through the same runner; their ids start with ``extra/``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.conftest import SERVER_SLOTS
from tests.conformance.runner import RunnerError, load_scenario, run_scenario
from tests.helpers import SPEC_DIR

SPEC_SCENARIOS = SPEC_DIR / "conformance" / "scenarios"
EXTRA_SCENARIOS = Path(__file__).resolve().parent / "scenarios"


def scenario_files(root: Path) -> list[Path]:
    """Found recursively, sorted by relative path; each file is validated by its own test."""
    return sorted(root.rglob("*.json"), key=lambda p: p.relative_to(root).as_posix())


SCENARIOS = [(root, path) for root in (SPEC_SCENARIOS, EXTRA_SCENARIOS) for path in scenario_files(root)]
IDS = [
    ("" if root == SPEC_SCENARIOS else "extra/") + path.relative_to(root).as_posix()
    for root, path in SCENARIOS
]


def test_scenarios_are_present():
    assert scenario_files(SPEC_SCENARIOS), f"no scenario files under {SPEC_SCENARIOS}"


@pytest.mark.conformance
@pytest.mark.parametrize("slot", range(len(SERVER_SLOTS)), ids=SERVER_SLOTS)
@pytest.mark.parametrize("root, path", SCENARIOS, ids=IDS)
def test_scenario(root, path, slot, conformance_servers, conformance_events):
    server = conformance_servers(slot)
    try:
        scenario = load_scenario(path, root)
    except RunnerError as exc:
        pytest.fail(f"invalid scenario file: {exc}", pytrace=False)
    outcome = run_scenario(scenario, server.drivers, server.dsn, conformance_events)
    if outcome.status == "skipped":
        pytest.skip(outcome.message)
    if outcome.status == "failed":
        pytest.fail(f"[{server.label}] {outcome.message}", pytrace=False)

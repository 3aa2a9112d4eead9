"""The conformance runner's own rules (SPEC.md (g)): scenario validation, matchers, overrides,
skips, and what a failure report shows. The runner is the judge of every scenario, so it gets
tests of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.conformance.runner import (
    _MISSING,
    MATCHERS,
    DriverProcess,
    EventValidator,
    RunnerError,
    Scenario,
    ScenarioRun,
    business_key,
    checkpoint_id,
    load_scenario,
    run_scenario,
    wire_time,
)
from tests.helpers import REPO, SPEC_DIR

EVENTS_SCHEMA = SPEC_DIR / "schema" / "postgres" / "events.schema.json"


def write(tmp_path, name, document) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize(
    "document, message",
    [
        ({"description": "d", "steps": [], "tags": []}, "unknown top-level"),
        ({"steps": []}, "missing"),
        ({"description": "d"}, "missing"),
        ({"description": 1, "steps": []}, "description"),
        ({"description": "d", "steps": [{"op": "teleport"}]}, "unknown op"),
        ({"description": "d", "steps": [{"op": "submit", "type": "t"}]}, "needs as"),
        ({"description": "d", "steps": [{"make_due": "a", "expect_row": {"activity": "a"}}]}, "exactly one"),
        ({"description": "d", "steps": [{"backdate": "a", "column": "id", "seconds": 1}]}, "column"),
        (
            {"description": "d", "steps": [{"expect_events": {"activity": "a", "types": [], "x": 1}}]},
            "exactly activity and types",
        ),
        ({"description": "d", "steps": [{"frobnicate": 1}]}, "exactly one"),
    ],
)
def test_invalid_scenario_files_are_refused(tmp_path, document, message):
    path = write(tmp_path, "x.json", document)
    with pytest.raises(RunnerError, match=message):
        load_scenario(path, tmp_path)


def test_every_shared_scenario_file_is_valid():
    root = SPEC_DIR / "conformance" / "scenarios"
    for path in sorted(root.rglob("*.json")):
        load_scenario(path, root)


def test_repeat_is_idempotent_gets_the_0_8_events_override():
    root = SPEC_DIR / "conformance" / "scenarios"
    scenario = load_scenario(root / "failure" / "repeat-is-idempotent.json", root)
    final = [step for step in scenario.steps if "expect_events" in step][-1]
    assert final["expect_events"]["types"] == ["Retrying"]
    assert scenario.overrides
    # the file itself stays as it is
    raw = json.loads((root / "failure" / "repeat-is-idempotent.json").read_text())
    assert raw["steps"][-1]["expect_events"]["types"] == ["Enqueued", "Dequeued", "Retrying"]


def test_spec_formulas_match_the_spec_examples():
    assert business_key("order-42", "Charge") == "rq:key:v2:ODpvcmRlci00MkNoYXJnZQ"
    assert business_key("é", "Charge") == "rq:key:v2:MjrDqUNoYXJnZQ"
    assert (
        checkpoint_id("6ba7b810-9dad-11d1-80b4-00c04fd430c8", "run", "charge")
        == "020e4a37-85b6-5ee4-a6c6-ce49b8c3fad7"
    )
    assert wire_time(datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)) == "2030-01-02T03:04:05.678Z"


@pytest.fixture
def run():
    scenario = Scenario("x.json", None, "d", [])
    runner = ScenarioRun(
        scenario, {"go": DriverProcess("go", "true")}, "postgres://unused", EventValidator(EVENTS_SCHEMA)
    )
    runner.claims["c"] = {"id": runner.uuid_of("a"), "token": "tok-1"}
    return runner


NOW = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "want, got, ok",
    [
        (1, 1.0, True),
        (1.0, 1, True),
        (1, True, False),  # booleans are not numbers
        (True, 1, False),
        (None, _MISSING, True),  # want null matches an absent field
        (None, None, True),
        (None, 0, False),
        ("x", _MISSING, False),
        ({"$null": True}, _MISSING, True),
        ({"$null": True}, "x", False),
        ({"$notnull": True}, _MISSING, False),
        ({"$notnull": True}, 0, True),
        ({"a": [1, {"b": 2}]}, {"a": [1.0, {"b": 2.0}]}, True),
        ({"a": 1}, {"a": 1, "b": 2}, False),  # deep equality, not a subset
        ([1, 2], [2, 1], False),
        ({"$token": "c"}, "tok-1", True),
        ({"$token": "c"}, "tok-2", False),
        ({"$future": True}, (NOW + timedelta(seconds=1)).isoformat(), True),
        ({"$future": True}, NOW.isoformat(), False),
        ({"$future": True}, int((NOW + timedelta(seconds=5)).timestamp() * 1000), True),
        ({"$future": True}, None, False),
        ({"$past": True}, NOW.isoformat(), True),
        ({"$past": True}, "2029-12-31T23:59:59.123456789Z", True),
        ({"$past": True}, int((NOW + timedelta(seconds=5)).timestamp() * 1000), False),
    ],
)
def test_matchers(run, want, got, ok):
    problem = run.match(want, got, now=lambda: NOW)
    assert (problem is None) == ok, problem


def test_id_and_checkpoint_matchers(run):
    a = run.uuid_of("a")
    assert run.match({"$id": "a"}, a, now=lambda: NOW) is None
    assert run.match({"$id": "a"}, a.upper(), now=lambda: NOW) is None
    assert run.match({"$id": "b"}, a, now=lambda: NOW) is not None
    assert (
        run.match({"$checkpoint": ["a", "signal", "go"]}, checkpoint_id(a, "signal", "go"), now=lambda: NOW)
        is None
    )
    assert set(MATCHERS) == {"$null", "$notnull", "$id", "$token", "$checkpoint", "$future", "$past"}


def test_names_mint_fresh_uuids_and_unknown_claims_are_runner_errors(run):
    ghost = run.uuid_of("ghost")
    assert ghost == run.uuid_of("ghost") != run.uuid_of("other")
    with pytest.raises(RunnerError, match="unknown claim"):
        run.resolve({"op": "complete", "claim": "nobody"})


def test_argument_resolution(run):
    args = run.resolve(
        {
            "op": "park",
            "claim": "c",
            "kind": "signal",
            "step": "signal:s",
            "wake_in_s": 60,
            "result_id": {"$checkpoint": ["a", "signal", "s"]},
            "producer": "p",
            "by": "go",
        }
    )
    assert args["claim"] == run.claims["c"] and "by" not in args and "wake_in_s" not in args
    assert args["result_id"] == checkpoint_id(run.uuid_of("a"), "signal", "s")
    assert args["producer"] == run.uuid_of("p")
    wake = datetime.strptime(args["wake_at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert 50 < (wake - datetime.now(UTC)).total_seconds() <= 60
    assert (
        run.resolve({"op": "lookup_key", "key": ["order-42", "Charge"]})["key"]
        == "rq:key:v2:ODpvcmRlci00MkNoYXJnZQ"
    )
    submit = run.resolve(
        {"op": "submit", "as": "n", "type": "t", "key": {"key": "k", "on_duplicate": "no_reuse"}}
    )
    assert submit == {"id": run.uuid_of("n"), "type": "t", "key": {"key": "k", "on_duplicate": "no_reuse"}}


def test_data_subset(run):
    assert (
        run.subset(
            {"error": "x", "type": "dead_letter"}, {"error": "x", "type": "dead_letter", "at": 1}, "data"
        )
        is None
    )
    assert run.subset({"a": {"b": 1}}, {"a": {"b": 1, "c": 2}}, "data") is None
    assert run.subset({"a": {"b": 1}}, {"a": {"c": 2}}, "data") is not None
    assert run.subset({"error": "x"}, None, "data") is not None


def test_event_validation_rules():
    events = EventValidator(EVENTS_SCHEMA)
    good = {"started_at": "2030-01-01T00:00:00.5+00:00", "error": "x"}
    assert events.problems("Failed", good, json.dumps(good), "tok") == []
    assert events.problems("Failed", good, json.dumps(good), None) == [
        "detail has started_at but worker_id is NULL"
    ]
    assert events.problems("Failed", None, None, "tok")  # NULL detail fails
    assert events.problems("Failed", {**good, "extra": 1}, "{}", "tok")  # additionalProperties
    assert events.problems("Failed", {**good, "started_at": "yesterday"}, "{}", "tok")  # formats are asserted
    assert events.problems("Completed", {}, "{}", None)  # no longer stored -> not defined


def test_a_scenario_naming_an_absent_driver_is_skipped(tmp_path):
    path = write(tmp_path, "mixed/x.json", {"description": "d", "steps": [{"op": "reap", "by": "ts"}]})
    scenario = load_scenario(path, tmp_path)
    outcome = run_scenario(
        scenario, {"go": DriverProcess("go", "true")}, "postgres://unused", EventValidator(EVENTS_SCHEMA)
    )
    assert outcome.status == "skipped" and "ts" in outcome.message


@pytest.mark.conformance
def test_a_failure_names_the_step_request_reply_and_stderr(tmp_path, conformance_servers, conformance_events):
    server = conformance_servers(0)
    path = write(
        tmp_path,
        "broken.json",
        {
            "description": "d",
            "steps": [
                {"op": "submit", "as": "a", "type": "t"},
                {"op": "claim", "types": ["t"], "as": ["c"], "expect": {"claims": ["a", "b"]}},
            ],
        },
    )
    outcome = run_scenario(load_scenario(path, tmp_path), server.drivers, server.dsn, conformance_events)
    assert outcome.status == "failed"
    message = outcome.message
    assert "step 2 of 2" in message and '"expect":{"claims":["a","b"]}' in message
    assert 'request: to driver \'go\': {"op":"claim"' in message
    assert 'reply:   {"ok":{"claims":[' in message
    assert "stderr of driver 'go'" in message and "The conformance driver serves queue" in message


@pytest.mark.conformance
def test_command_line_runner(pg_servers, conformance_servers):
    server = conformance_servers(0)
    driver = f"{sys.executable} manage.py runnerq_driver"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.conformance.runner",
            "--dsn",
            server.dsn,
            "--run",
            "^(ack|mixed)/",
            "--driver",
            f"go={driver}",
            "--driver",
            f"ts={driver}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "6 passed, 0 failed, 0 skipped", proc.stdout
    # a lone driver under another name skips the mixed scenarios
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.conformance.runner",
            "--dsn",
            server.dsn,
            "--run",
            "^mixed/",
            "--driver",
            f"py={driver}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] == "0 passed, 0 failed, 2 skipped", (
        proc.stdout
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.conformance.runner",
            "--dsn",
            server.dsn,
            "--driver",
            f"go={driver}",
            "--scenarios",
            "/nonexistent",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "setup error" in proc.stderr


@pytest.mark.conformance
def test_bulk_steps_submit_many_and_drain_across_drivers(tmp_path, conformance_servers, conformance_events):
    server = conformance_servers(0)
    path = write(
        tmp_path,
        "bulk.json",
        {
            "description": "d",
            "steps": [
                {"submit_many": {"prefix": "none", "n": 0, "type": "empty"}},
                {"drain": {"types": ["empty"], "by": ["go"], "limit": 0, "prefix": "none", "n": 0}},
                {"submit_many": {"prefix": "w", "n": 60, "type": "bulk", "by": "ts"}},
                {"drain": {"types": ["bulk"], "by": ["go", "ts"], "limit": 4, "prefix": "w", "n": 60}},
                {
                    "expect_row": {
                        "activity": "w59",
                        "status": "processing",
                        "lease_deadline_ms": {"$future": True},
                    }
                },
                {"op": "claim", "types": ["bulk"], "expect": {"claims": []}},
            ],
        },
    )
    outcome = run_scenario(load_scenario(path, tmp_path), server.drivers, server.dsn, conformance_events)
    assert outcome.status == "passed", outcome.message

    # and a drain that expects more than there is fails, naming the missing activity
    path = write(
        tmp_path,
        "short.json",
        {
            "description": "d",
            "steps": [
                {"submit_many": {"prefix": "w", "n": 2, "type": "bulk2"}},
                {"drain": {"types": ["bulk2"], "by": ["go", "ts"], "limit": 1, "prefix": "w", "n": 3}},
            ],
        },
    )
    outcome = run_scenario(load_scenario(path, tmp_path), server.drivers, server.dsn, conformance_events)
    assert outcome.status == "failed" and "w2 claimed 0 times" in outcome.message, outcome.message


@pytest.mark.conformance
def test_fixtures_without_a_row_fail(tmp_path, conformance_servers, conformance_events):
    server = conformance_servers(0)
    for fixture in (
        {"make_due": "ghost"},
        {"expire_lease": "ghost"},
        {"backdate": "ghost", "column": "created_at", "seconds": 1},
        {"backdate_events": "ghost", "seconds": 1},
    ):
        path = write(tmp_path, "f.json", {"description": "d", "steps": [{"sleep_ms": 1}, fixture]})
        outcome = run_scenario(load_scenario(path, tmp_path), server.drivers, server.dsn, conformance_events)
        assert outcome.status == "failed" and "no row" in outcome.message, (fixture, outcome.message)


@pytest.mark.conformance
def test_a_dead_driver_is_restarted_before_the_next_scenario(
    tmp_path, conformance_servers, conformance_events
):
    import os
    import signal

    from tests.conformance.conftest import DRIVER_COMMAND
    from tests.conformance.runner import driver_env

    server = conformance_servers(0)
    driver = DriverProcess("go", DRIVER_COMMAND, env=driver_env(server.dsn), cwd=REPO).start()
    try:
        os.killpg(driver.proc.pid, signal.SIGKILL)
        driver.proc.wait()
        path = write(
            tmp_path, "s.json", {"description": "d", "steps": [{"op": "reap", "expect": {"count": 0}}]}
        )
        outcome = run_scenario(load_scenario(path, tmp_path), {"go": driver}, server.dsn, conformance_events)
        assert outcome.status == "passed", outcome.message
    finally:
        driver.stop()


@pytest.mark.conformance
def test_a_driver_breaking_the_protocol_fails_the_scenario(tmp_path, conformance_servers, conformance_events):
    server = conformance_servers(0)
    path = write(tmp_path, "s.json", {"description": "d", "steps": [{"op": "reap"}]})
    for command, why in [
        ("read line; echo 'not json'; echo oops >&2; cat >/dev/null", "reply is not JSON"),
        ("read line; echo '{\"ok\": null}'; cat >/dev/null", "ok must be an object"),
        ('read line; echo \'{"ok": {}, "error": {"kind": "internal"}}\'; cat >/dev/null', "reply must be"),
        ("echo bye >&2; exit 3", "exit status 3"),
    ]:
        driver = DriverProcess("go", command).start()
        try:
            outcome = run_scenario(
                load_scenario(path, tmp_path), {"go": driver}, server.dsn, conformance_events
            )
        finally:
            driver.stop()
        assert outcome.status == "failed" and why in outcome.message and "open" in outcome.message, (
            outcome.message
        )

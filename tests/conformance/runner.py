"""The RunnerQ conformance runner (SPEC.md section (g)), shared by the pytest tests and the command line.

It plays the spec's scenario files against one or more driver processes that speak the line
protocol (``manage.py runnerq_driver``, or a Go/TypeScript driver) and checks the database
straight with SQL. It deliberately imports nothing from ``runnerq_django``: the keys and
checkpoint ids it needs are recomputed here from the spec's formulas, so a bug in the app's own
encodings can't hide itself.

Command line::

    python -m tests.conformance.runner --dsn postgres://... \\
        --driver go='python manage.py runnerq_driver' --driver ts='python manage.py runnerq_driver'

prints one line per scenario and ``N passed, N failed, N skipped``; exit status 1 when a scenario
failed, 2 on setup errors.
"""

from __future__ import annotations

import argparse
import base64
import collections
import contextlib
import json
import os
import queue as queue_module
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SPEC = REPO / "runnerq_django" / "spec" / "data"  # the repository's copy of the spec data

OPEN_TIMEOUT = 120.0
OP_TIMEOUT = 30.0
STDERR_TAIL_BYTES = 8 * 1024
MAX_LINE_BYTES = 16 * 1024 * 1024
DRAIN_LEASE_MS = 60000

OPERATION_KEYS = {"op", "as", "by", "expect"}  # never sent to the driver
OPS = {
    "open",
    "submit",
    "claim",
    "renew",
    "complete",
    "fail",
    "checkpoint",
    "register_dependency",
    "park",
    "signal",
    "lookup_key",
    "reap",
    "cleanup",
    "get_result",
}
FIXTURES = {
    "expire_lease": set(),
    "make_due": set(),
    "backdate": {"column", "seconds"},
    "backdate_events": {"seconds"},
    "sleep_ms": set(),
}
BACKDATE_COLUMNS = {"completed_at", "created_at", "scheduled_at"}
EXPECTATIONS = {"expect_row", "expect_events", "expect_result", "expect_absent"}
BULK = {"submit_many": {"prefix", "n", "type", "by"}, "drain": {"types", "by", "limit", "prefix", "n"}}
MATCHERS = {"$null", "$notnull", "$id", "$token", "$checkpoint", "$future", "$past"}
BUSINESS_KEY_PREFIX = "rq:key:v2:"


# --- errors --------------------------------------------------------------------------------------


class RunnerError(Exception):
    """The runner itself can't go on: a bad scenario file, an unknown claim name, no database."""


class StepFailed(AssertionError):
    """A step's expectation didn't hold (the message says what was wanted and what was found)."""


class DriverError(Exception):
    """A driver broke the protocol: no reply in time, an unparsable reply, or it exited."""


class ScenarioSkipped(Exception):
    pass


class ScenarioFailed(AssertionError):
    pass


# --- spec formulas (SPEC.md (d)) -----------------------------------------------------------------


def business_key(key: str, activity_type: str) -> str:
    raw = f"{len(key.encode())}:{key}{activity_type}".encode()
    return BUSINESS_KEY_PREFIX + base64.b64encode(raw).decode().rstrip("=")


def checkpoint_id(activity_id: str, kind: str, name: str) -> str:
    return str(uuid.uuid5(uuid.UUID(activity_id), f"{kind}:{name}"))


def wire_time(moment: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS.mmmZ`` in UTC, the driver protocol's timestamp format."""
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def parse_moment(value: Any) -> datetime:
    """An RFC 3339 string (any precision) or integer epoch milliseconds, as an aware datetime."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a time")
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value / 1000, tz=UTC)
    if isinstance(value, str):
        text = value.strip().replace("Z", "+00:00").replace("z", "+00:00")
        # Python reads at most microseconds; Go writes nanoseconds.
        text = re.sub(r"(\.\d{6})\d+", r"\1", text)
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is None:
            raise ValueError(f"{value!r} has no time zone")
        return moment
    raise ValueError(f"{value!r} is not a time")


# --- scenario files ------------------------------------------------------------------------------


@dataclass
class Scenario:
    rel: str  # path relative to the scenarios folder, with forward slashes: the test id
    path: Path
    description: str
    steps: list[dict]
    overrides: list[str] = field(default_factory=list)

    def drivers_named(self) -> set[str]:
        names: set[str] = set()
        for step in self.steps:
            if "op" in step and "by" in step:
                names.add(step["by"])
            if "submit_many" in step and step["submit_many"].get("by"):
                names.add(step["submit_many"]["by"])
            if "drain" in step:
                names.update(step["drain"].get("by") or [])
        return names


def _override_repeat_is_idempotent(scenario: Scenario) -> None:
    """SPEC.md caveat 2: the file is the 0.6 version; since 0.7 Enqueued/Dequeued are never stored."""
    stale = ["Enqueued", "Dequeued", "Retrying"]
    for step in reversed(scenario.steps):
        if "expect_events" in step:
            if step["expect_events"].get("types") == stale:
                step["expect_events"]["types"] = ["Retrying"]
                scenario.overrides.append(
                    'final expect_events types ["Enqueued","Dequeued","Retrying"] -> ["Retrying"] (SPEC.md caveat 2)'
                )
            return


OVERRIDES: dict[str, Callable[[Scenario], None]] = {
    "failure/repeat-is-idempotent.json": _override_repeat_is_idempotent,
}


def load_scenario(path: Path, root: Path) -> Scenario:
    rel = path.relative_to(root).as_posix()
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise RunnerError(f"{rel}: not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise RunnerError(f"{rel}: a scenario must be a JSON object")
    unknown = set(document) - {"description", "steps"}
    if unknown:
        raise RunnerError(f"{rel}: unknown top-level key(s) {sorted(unknown)} (only description and steps)")
    missing = {"description", "steps"} - set(document)
    if missing:
        raise RunnerError(f"{rel}: missing top-level key(s) {sorted(missing)}")
    if not isinstance(document["description"], str):
        raise RunnerError(f"{rel}: description must be a string")
    steps = document["steps"]
    if not isinstance(steps, list):
        raise RunnerError(f"{rel}: steps must be a list")
    for index, step in enumerate(steps, 1):
        problem = step_problem(step)
        if problem:
            raise RunnerError(f"{rel}: step {index} {json.dumps(step)}: {problem}")
    scenario = Scenario(rel, path, document["description"], steps)
    if rel in OVERRIDES:
        OVERRIDES[rel](scenario)
    return scenario


def discover(scenarios_dir: Path, pattern: str | None = None) -> list[Scenario]:
    """Every ``*.json`` under ``scenarios_dir``, recursively, sorted by relative path."""
    if not scenarios_dir.is_dir():
        raise RunnerError(f"no scenarios folder at {scenarios_dir}")
    regex = re.compile(pattern) if pattern else None
    found = []
    for path in sorted(scenarios_dir.rglob("*.json"), key=lambda p: p.relative_to(scenarios_dir).as_posix()):
        rel = path.relative_to(scenarios_dir).as_posix()
        if regex and not regex.search(rel):
            continue
        found.append(load_scenario(path, scenarios_dir))
    return found


def step_problem(step: Any) -> str | None:
    """Why a step is malformed (``None`` when it is fine): a step is exactly one of the kinds."""
    if not isinstance(step, dict):
        return "a step must be an object"
    if "op" in step:
        if not isinstance(step["op"], str) or step["op"] not in OPS - {"open"}:
            return f"unknown op {step['op']!r}"
        if "by" in step and not isinstance(step["by"], str):
            return "by must be a driver name"
        if "expect" in step and not isinstance(step["expect"], dict):
            return "expect must be an object"
        if "as" in step:
            if step["op"] == "submit" and not isinstance(step["as"], str):
                return "as of a submit must be a name"
            if step["op"] == "claim" and not (
                isinstance(step["as"], list) and all(isinstance(n, str) for n in step["as"])
            ):
                return "as of a claim must be a list of names"
            if step["op"] not in ("submit", "claim"):
                return f"as is only for submit and claim, not {step['op']}"
        if step["op"] == "submit" and "as" not in step:
            return "a submit needs as (its activity's name)"
        return None
    kinds = [key for key in step if key in FIXTURES or key in EXPECTATIONS or key in BULK]
    if len(kinds) != 1:
        return f"a step is exactly one of op, fixture, bulk or expectation; found {kinds or 'none'}"
    kind = kinds[0]
    if kind in FIXTURES:
        extra = set(step) - {kind} - FIXTURES[kind]
        missing = FIXTURES[kind] - set(step)
        if extra or missing:
            return f"{kind} takes {sorted(FIXTURES[kind]) or 'no other keys'}; extra {sorted(extra)}, missing {sorted(missing)}"
        if kind == "backdate" and step["column"] not in BACKDATE_COLUMNS:
            return f"backdate column must be one of {sorted(BACKDATE_COLUMNS)}"
        return None
    if set(step) != {kind}:
        return f"{kind} takes no sibling keys"
    body = step[kind]
    if kind in BULK:
        if not isinstance(body, dict) or set(body) - BULK[kind]:
            return f"{kind} must be an object with keys among {sorted(BULK[kind])}"
        if not isinstance(body.get("prefix"), str) or not isinstance(body.get("n"), int):
            return f"{kind} needs prefix (string) and n (integer)"
        if kind == "drain" and not (isinstance(body.get("by"), list) and body["by"]):
            return "drain.by must be a non-empty list of driver names"
        return None
    if kind == "expect_absent":
        return None if isinstance(body, str) else "expect_absent takes a name"
    if not isinstance(body, dict):
        return f"{kind} must be an object"
    if kind == "expect_events" and set(body) != {"activity", "types"}:
        return "expect_events takes exactly activity and types"
    if kind == "expect_row" and "activity" not in body:
        return "expect_row needs activity"
    if kind == "expect_result" and "id" not in body:
        return "expect_result needs id"
    return None


# --- driver processes ----------------------------------------------------------------------------

_EOF = object()


class DriverProcess:
    """One driver started with ``sh -c <command>``: a request/reply line at a time, stderr kept."""

    def __init__(self, name: str, command: str, *, env: dict | None = None, cwd: Path | str | None = None):
        self.name = name
        self.command = command
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self.broken = False
        self._lock = threading.Lock()
        self._replies: queue_module.Queue = queue_module.Queue()
        self._stderr = collections.deque()
        self._stderr_size = 0
        self._stderr_lock = threading.Lock()

    def start(self) -> DriverProcess:
        self.proc = subprocess.Popen(
            ["sh", "-c", self.command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=self.cwd,
            env=self.env,
            start_new_session=True,
        )
        self.broken = False
        self._replies = queue_module.Queue()
        threading.Thread(
            target=self._read_stdout,
            args=(self.proc, self._replies),
            daemon=True,
            name=f"driver-{self.name}-stdout",
        ).start()
        threading.Thread(
            target=self._read_stderr, args=(self.proc,), daemon=True, name=f"driver-{self.name}-stderr"
        ).start()
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and not self.broken

    def ensure_running(self) -> None:
        if not self.alive:
            self.stop()
            self.start()

    def _read_stdout(self, proc: subprocess.Popen, replies: queue_module.Queue) -> None:
        try:
            while True:
                line = proc.stdout.readline(MAX_LINE_BYTES + 2)
                if not line:
                    break
                replies.put(line)
        except (OSError, ValueError):
            pass
        replies.put(_EOF)

    def _read_stderr(self, proc: subprocess.Popen) -> None:
        try:
            while True:
                chunk = proc.stderr.read1(65536)
                if not chunk:
                    return
                with self._stderr_lock:
                    self._stderr.append(chunk)
                    self._stderr_size += len(chunk)
                    while self._stderr_size - len(self._stderr[0]) >= STDERR_TAIL_BYTES:
                        self._stderr_size -= len(self._stderr.popleft())
        except (OSError, ValueError):
            return

    def stderr_tail(self) -> str:
        with self._stderr_lock:
            data = b"".join(self._stderr)[-STDERR_TAIL_BYTES:]
        return data.decode("utf-8", errors="replace")

    def request(self, op: str, args: dict, *, timeout: float) -> tuple[str, dict]:
        """Send one request; return ``(request line, reply object)``. A protocol breach raises
        :class:`DriverError` and marks the driver broken (it is restarted before the next scenario)."""
        line = json.dumps({"op": op, "args": args}, separators=(",", ":"))
        with self._lock:
            if self.proc is None or self.proc.poll() is not None:
                self.broken = True
                raise DriverError(
                    f"driver {self.name!r} is not running (exit status {self.proc and self.proc.returncode})"
                )
            try:
                self.proc.stdin.write(line.encode() + b"\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                self.broken = True
                raise DriverError(
                    f"driver {self.name!r}: writing the request failed: {exc}"
                    f" (exit status {self._exit_status()})"
                ) from None
            try:
                raw = self._replies.get(timeout=timeout)
            except queue_module.Empty:
                self.broken = True
                raise DriverError(f"driver {self.name!r}: no reply within {timeout:.0f} s") from None
            if raw is _EOF:
                self.broken = True
                raise DriverError(
                    f"driver {self.name!r} closed stdout without a reply (exit status {self._exit_status()})"
                )
        if len(raw) > MAX_LINE_BYTES + 1:
            self.broken = True
            raise DriverError(f"driver {self.name!r}: reply line longer than 16 MiB")
        return line, self._parse_reply(raw)

    def _exit_status(self) -> int | None:
        try:
            return self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None

    def _parse_reply(self, raw: bytes) -> dict:
        text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        try:
            reply = json.loads(text)
        except ValueError:
            self.broken = True
            raise DriverError(f"driver {self.name!r}: reply is not JSON: {text[:2000]!r}") from None
        if not isinstance(reply, dict) or len(reply) != 1 or not ({"ok", "error"} & set(reply)):
            raise DriverError(
                f'driver {self.name!r}: reply must be {{"ok": {{...}}}} or {{"error": {{...}}}}: {text[:2000]}'
            )
        if "ok" in reply and not isinstance(reply["ok"], dict):
            raise DriverError(f"driver {self.name!r}: ok must be an object (never null): {text[:2000]}")
        if "error" in reply and not (
            isinstance(reply["error"], dict) and isinstance(reply["error"].get("kind"), str)
        ):
            raise DriverError(f"driver {self.name!r}: error must be an object with a kind: {text[:2000]}")
        return reply

    def stop(self, timeout: float = 10) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.close()


def driver_env(dsn: str, base: dict | None = None) -> dict:
    """The environment of a driver process: DATABASE_URL names the database under test, so a
    settings module that reads it never starts a database of its own (``open`` repoints anyway)."""
    env = dict(os.environ if base is None else base)
    env.pop("PGHOST", None)
    env["DATABASE_URL"] = dsn
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


# --- events schema -------------------------------------------------------------------------------


class EventValidator:
    """Validates stored event details against ``events.schema.json`` ``$defs`` (formats asserted)."""

    def __init__(self, schema_path: Path):
        from jsonschema import Draft202012Validator

        from tests.helpers import format_checker

        self.schema = json.loads(schema_path.read_text(encoding="utf-8"))
        checker = format_checker()
        self.validators = {
            name: Draft202012Validator({**self.schema, "$ref": f"#/$defs/{name}"}, format_checker=checker)
            for name in self.schema["$defs"]
        }

    def problems(
        self, event_type: str, detail: Any, detail_text: str | None, worker_id: str | None
    ) -> list[str]:
        validator = self.validators.get(event_type)
        if validator is None:
            return [f"event_type {event_type!r} is not defined in events.schema.json"]
        found = [
            f"{'/'.join(map(str, error.absolute_path)) or 'detail'}: {error.message}"
            for error in validator.iter_errors(detail)
        ]
        if detail_text is not None and '"started_at"' in detail_text and worker_id is None:
            found.append("detail has started_at but worker_id is NULL")
        return found


# --- running one scenario ------------------------------------------------------------------------


@dataclass
class Exchange:
    driver: str
    request: str
    reply: Any


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


_MISSING = object()


class ScenarioRun:
    """One scenario against the given drivers (the first is the default) and database."""

    def __init__(
        self,
        scenario: Scenario,
        drivers: dict[str, DriverProcess],
        dsn: str,
        events: EventValidator,
        *,
        log: Callable[[str], None] | None = None,
    ):
        if not drivers:
            raise RunnerError("no driver given")
        self.scenario = scenario
        self.drivers = drivers
        self.default_driver = next(iter(drivers))
        self.dsn = dsn
        self.events = events
        self.log = log or (lambda message: None)
        self.queue = "cf_" + secrets.token_hex(8)
        self.names: dict[str, str] = {}
        self.claims: dict[str, dict] = {}
        self.last: Exchange | None = None
        self.db = None

    # entry point --------------------------------------------------------------------------------

    def run(self) -> None:
        missing = self.scenario.drivers_named() - set(self.drivers)
        if missing:
            raise ScenarioSkipped(f"needs driver(s) {', '.join(sorted(missing))}, not given")
        import psycopg

        try:
            self.db = psycopg.connect(self.dsn, autocommit=True)
        except psycopg.Error as exc:
            raise RunnerError(f"cannot connect to {self.dsn}: {exc}") from None
        try:
            for driver in self.drivers.values():
                self._guarded("open", {"op": "open"}, lambda d=driver: self._open(d))
            total = len(self.scenario.steps)
            for index, step in enumerate(self.scenario.steps, 1):
                self.log(f"  step {index}/{total}: {_dumps(step)}")
                self._guarded(f"step {index} of {total}", step, lambda s=step: self.execute(s))
            self._guarded("after the last step (events schema)", None, self.check_event_schema)
        finally:
            self.db.close()

    def _open(self, driver: DriverProcess) -> None:
        self.call(
            driver, "open", {"dsn": self.dsn, "queue": self.queue}, timeout=OPEN_TIMEOUT, expect_ok=True
        )

    def _guarded(self, where: str, step: Any, action: Callable[[], None]) -> None:
        self.last = None
        try:
            action()
        except (StepFailed, DriverError, RunnerError) as exc:
            raise ScenarioFailed(self._report(where, step, exc)) from None
        except Exception as exc:  # a bug in the runner or the database: still say where
            raise ScenarioFailed(self._report(where, step, exc, trace=traceback.format_exc())) from None

    def _report(self, where: str, step: Any, exc: Exception, trace: str | None = None) -> str:
        kind = {StepFailed: "failed", DriverError: "driver error", RunnerError: "runner error"}.get(
            type(exc), "error"
        )
        lines = [f"{self.scenario.rel} (queue {self.queue}) {where}: {kind}"]
        if step is not None:
            lines.append(f"  step:    {_dumps(step)}")
        if self.last is not None:
            lines.append(f"  request: to driver {self.last.driver!r}: {self.last.request}")
            reply = self.last.reply
            lines.append(f"  reply:   {reply if isinstance(reply, str) else _dumps(reply)}")
        lines.append(f"  why:     {exc}")
        if self.scenario.overrides:
            lines.append(f"  overrides applied: {'; '.join(self.scenario.overrides)}")
        if trace:
            lines.append(trace)
        shown = [self.last.driver] if self.last is not None else list(self.drivers)
        for name in shown:
            driver = self.drivers.get(name)
            if driver is not None:
                tail = driver.stderr_tail().rstrip()
                lines.append(f"  stderr of driver {name!r} (last {STDERR_TAIL_BYTES // 1024} KiB):")
                lines.append("    " + ("\n    ".join(tail.splitlines()) if tail else "(empty)"))
        return "\n".join(lines)

    # driver calls -------------------------------------------------------------------------------

    def call(
        self,
        driver: DriverProcess,
        op: str,
        args: dict,
        *,
        timeout: float = OP_TIMEOUT,
        expect_ok: bool = False,
    ) -> dict:
        request, reply = driver.request(op, args, timeout=timeout)
        self.last = Exchange(driver.name, request, reply)
        if expect_ok and "error" in reply:
            raise StepFailed(f"{op} failed: {reply['error'].get('kind')}: {reply['error'].get('message')}")
        return reply

    def driver(self, name: str | None) -> DriverProcess:
        name = name or self.default_driver
        if name not in self.drivers:
            raise RunnerError(f"no driver named {name!r}")
        return self.drivers[name]

    # names --------------------------------------------------------------------------------------

    def uuid_of(self, name: Any) -> str:
        if not isinstance(name, str):
            raise RunnerError(f"an activity name must be a string, got {_dumps(name)}")
        if name not in self.names:
            self.names[name] = str(uuid.uuid4())
        return self.names[name]

    def result_id(self, value: Any) -> str:
        if isinstance(value, dict) and set(value) == {"$checkpoint"}:
            spec = value["$checkpoint"]
            if not (isinstance(spec, list) and len(spec) == 3 and all(isinstance(s, str) for s in spec)):
                raise RunnerError(f"$checkpoint takes [name, kind, step], got {_dumps(spec)}")
            return checkpoint_id(self.uuid_of(spec[0]), spec[1], spec[2])
        return self.uuid_of(value)

    def claim_of(self, name: Any) -> dict:
        if not isinstance(name, str) or name not in self.claims:
            raise RunnerError(f"unknown claim {_dumps(name)} (bound claims: {sorted(self.claims)})")
        return self.claims[name]

    def resolve(self, step: dict) -> dict:
        op = step["op"]
        args: dict[str, Any] = {}
        for key, value in step.items():
            if key in OPERATION_KEYS:
                continue
            if key in ("claim", "fence"):
                args[key] = self.claim_of(value)
            elif key in ("parent", "root", "target", "producer"):
                args[key] = self.uuid_of(value)
            elif key in ("result_id", "id"):
                args[key] = self.result_id(value)
            elif key == "key" and isinstance(value, list):
                if len(value) != 2 or not all(isinstance(v, str) for v in value):
                    raise RunnerError(f"key as a list is [key, type], got {_dumps(value)}")
                args[key] = business_key(value[0], value[1])
            elif key == "wake_in_s" and op == "park":
                args["wake_at"] = wire_time(datetime.now(UTC) + timedelta(seconds=value))
            else:
                args[key] = value
        if op == "submit":
            args["id"] = self.uuid_of(step["as"])
        return args

    # steps --------------------------------------------------------------------------------------

    def execute(self, step: dict) -> None:
        if "op" in step:
            return self.operation(step)
        kind = next(key for key in step if key in FIXTURES or key in EXPECTATIONS or key in BULK)
        getattr(self, kind)(step)

    def operation(self, step: dict) -> None:
        op = step["op"]
        driver = self.driver(step.get("by"))
        args = self.resolve(step)
        expect = step.get("expect") or {}
        reply = self.call(driver, op, args)
        if "error" in expect:
            if "error" not in reply:
                raise StepFailed(f"wanted error {expect['error']!r}, got ok")
            if reply["error"].get("kind") != expect["error"]:
                raise StepFailed(f"wanted error {expect['error']!r}, got {reply['error'].get('kind')!r}")
            return
        if "error" in reply:
            raise StepFailed(
                f"unexpected error {reply['error'].get('kind')!r}: {reply['error'].get('message')}"
            )
        ok = reply["ok"]
        if op == "claim":
            claims = ok.get("claims")
            if not isinstance(claims, list) or not all(
                isinstance(c, dict) and isinstance(c.get("id"), str) and isinstance(c.get("token"), str)
                for c in claims
            ):
                raise StepFailed(f'claim must reply {{"claims": [{{"id", "token"}}, ...]}}, got {_dumps(ok)}')
            for name, claimed in zip(step.get("as") or [], claims):
                self.claims[name] = claimed
        for key, want in expect.items():
            if key == "claims" and op == "claim":
                wanted = [self.uuid_of(name) for name in want]
                got = [c["id"].lower() for c in ok["claims"]]
                if got != wanted:
                    raise StepFailed(f"claims: wanted {self._named(wanted)}, got {self._named(got)}")
                continue
            problem = self.match(want, ok.get(key, _MISSING), now=self.db_now)
            if problem:
                raise StepFailed(f"reply field {key}: {problem}")

    def _named(self, ids: list[str]) -> str:
        by_id = {value: name for name, value in self.names.items()}
        return "[" + ", ".join(f"{by_id.get(i, '?')}={i}" for i in ids) + "]"

    # fixtures -----------------------------------------------------------------------------------

    def _fixture(self, sql: str, params: list, what: str) -> None:
        cursor = self.db.execute(sql, params)
        if cursor.rowcount < 1:
            raise StepFailed(f"{what}: no row")

    def expire_lease(self, step: dict) -> None:
        self._fixture(
            "UPDATE runnerq_activities SET lease_deadline_ms = floor(extract(epoch FROM now()) * 1000)::bigint - 10000"
            " WHERE id = %s AND queue_name = %s",
            [self.uuid_of(step["expire_lease"]), self.queue],
            "expire_lease",
        )

    def make_due(self, step: dict) -> None:
        self._fixture(
            "UPDATE runnerq_activities SET scheduled_at = now() WHERE id = %s AND queue_name = %s",
            [self.uuid_of(step["make_due"]), self.queue],
            "make_due",
        )

    def backdate(self, step: dict) -> None:
        column = step["column"]
        assert (
            column in BACKDATE_COLUMNS
        )  # validated when the file was loaded; never interpolate anything else
        self._fixture(
            f"UPDATE runnerq_activities SET {column} = {column} - make_interval(secs => %s::float8)"
            " WHERE id = %s AND queue_name = %s",
            [step["seconds"], self.uuid_of(step["backdate"]), self.queue],
            "backdate",
        )

    def backdate_events(self, step: dict) -> None:
        self._fixture(
            "UPDATE runnerq_events SET created_at = created_at - make_interval(secs => %s::float8)"
            " WHERE activity_id = %s AND queue_name = %s",
            [step["seconds"], self.uuid_of(step["backdate_events"]), self.queue],
            "backdate_events",
        )

    def sleep_ms(self, step: dict) -> None:
        time.sleep(step["sleep_ms"] / 1000)

    # bulk ---------------------------------------------------------------------------------------

    def submit_many(self, step: dict) -> None:
        body = step["submit_many"]
        driver = self.driver(body.get("by"))
        for i in range(body["n"]):
            args = {"id": self.uuid_of(f"{body['prefix']}{i}"), "type": body["type"]}
            self.call(driver, "submit", args, expect_ok=True)

    def drain(self, step: dict) -> None:
        body = step["drain"]
        limit = max(int(body.get("limit") or 1), 1)
        claimed: dict[str, list[str]] = {name: [] for name in body["by"]}
        failures: list[str] = []
        drivers = [self.driver(name) for name in body["by"]]

        def loop(driver: DriverProcess) -> None:
            args = {"limit": limit, "lease_ms": DRAIN_LEASE_MS}
            if body.get("types") is not None:
                args["types"] = body["types"]
            try:
                while True:
                    request, reply = driver.request("claim", args, timeout=OP_TIMEOUT)
                    if "error" in reply:
                        failures.append(f"driver {driver.name!r}: {request} -> {_dumps(reply)}")
                        return
                    claims = reply["ok"].get("claims")
                    if not isinstance(claims, list):
                        failures.append(
                            f"driver {driver.name!r}: claim reply without claims: {_dumps(reply)}"
                        )
                        return
                    if not claims:
                        return
                    claimed[driver.name].extend(c["id"].lower() for c in claims)
            except DriverError as exc:
                failures.append(str(exc))

        threads = [threading.Thread(target=loop, args=(d,), name=f"drain-{d.name}") for d in drivers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise StepFailed("drain: " + "; ".join(failures))
        every = [i for ids in claimed.values() for i in ids]
        counts = collections.Counter(every)
        wanted = {self.uuid_of(f"{body['prefix']}{i}"): f"{body['prefix']}{i}" for i in range(body["n"])}
        problems = [f"{name} claimed {counts[i]} times" for i, name in wanted.items() if counts[i] != 1]
        if len(counts) != body["n"]:
            problems.append(f"{len(counts)} distinct activities claimed, wanted {body['n']}")
        if problems:
            per_driver = ", ".join(f"{name}: {len(ids)}" for name, ids in claimed.items())
            raise StepFailed(f"drain ({per_driver}): " + "; ".join(problems[:20]))

    # expectations -------------------------------------------------------------------------------

    def expect_row(self, step: dict) -> None:
        body = step["expect_row"]
        row = self.db.execute(
            "SELECT to_jsonb(a), now() FROM runnerq_activities a WHERE id = %s AND queue_name = %s",
            [self.uuid_of(body["activity"]), self.queue],
        ).fetchone()
        if row is None:
            raise StepFailed(f"expect_row: no activity {body['activity']!r} in the queue")
        columns, now = row
        for key, want in body.items():
            if key == "activity":
                continue
            if key not in columns:
                raise StepFailed(f"expect_row: {key!r} is not a column of runnerq_activities")
            problem = self.match(want, columns[key], now=lambda: now)
            if problem:
                raise StepFailed(f"expect_row {body['activity']}.{key}: {problem}\n  row: {_dumps(columns)}")

    def expect_events(self, step: dict) -> None:
        body = step["expect_events"]
        rows = self.db.execute(
            "SELECT event_type FROM runnerq_events WHERE activity_id = %s AND queue_name = %s ORDER BY id",
            [self.uuid_of(body["activity"]), self.queue],
        ).fetchall()
        got = [r[0] for r in rows]
        if got != body["types"]:
            raise StepFailed(f"expect_events {body['activity']}: wanted {body['types']}, got {got}")

    def expect_result(self, step: dict) -> None:
        body = step["expect_result"]
        result_id = self.result_id(body["id"])
        row = self.db.execute(
            "SELECT to_jsonb(x) FROM runnerq_results x WHERE activity_id = %s AND queue_name = %s",
            [result_id, self.queue],
        ).fetchone()
        if body.get("absent") is True:
            if row is not None:
                raise StepFailed(
                    f"expect_result {_dumps(body['id'])}: wanted no result, found {_dumps(row[0])}"
                )
            return
        if row is None:
            raise StepFailed(f"expect_result {_dumps(body['id'])}: no result row {result_id} in the queue")
        columns = row[0]
        for key, want in body.items():
            if key in ("id", "absent"):
                continue
            if key == "data_subset":
                problem = self.subset(want, columns.get("data"), "data")
            elif key not in columns:
                raise StepFailed(f"expect_result: {key!r} is not a column of runnerq_results")
            else:
                problem = self.match(want, columns[key], now=self.db_now)
            if problem:
                raise StepFailed(
                    f"expect_result {_dumps(body['id'])}.{key}: {problem}\n  row: {_dumps(columns)}"
                )

    def expect_absent(self, step: dict) -> None:
        activity = self.uuid_of(step["expect_absent"])
        count = self.db.execute(
            "SELECT (SELECT count(*) FROM runnerq_activities WHERE id = %(id)s)"
            " + (SELECT count(*) FROM runnerq_inputs WHERE activity_id = %(id)s)"
            " + (SELECT count(*) FROM runnerq_events WHERE activity_id = %(id)s)"
            " + (SELECT count(*) FROM runnerq_results WHERE activity_id = %(id)s OR owner_activity_id = %(id)s)",
            {"id": activity},
        ).fetchone()[0]
        if count:
            raise StepFailed(
                f"expect_absent {step['expect_absent']}: {count} row(s) still refer to {activity}"
            )

    def check_event_schema(self) -> None:
        rows = self.db.execute(
            "SELECT id, activity_id::text, event_type, worker_id, COALESCE(detail, 'null'::jsonb), detail::text"
            " FROM runnerq_events WHERE queue_name = %s ORDER BY id",
            [self.queue],
        ).fetchall()
        by_id = {value: name for name, value in self.names.items()}
        problems = []
        for event_id, activity, event_type, worker_id, detail, detail_text in rows:
            for problem in self.events.problems(event_type, detail, detail_text, worker_id):
                problems.append(
                    f"event {event_id} {event_type} of {by_id.get(activity, activity)}: {problem}"
                    f" (detail {detail_text}, worker_id {worker_id!r})"
                )
        if problems:
            raise StepFailed("stored events break events.schema.json:\n    " + "\n    ".join(problems))

    # matching -----------------------------------------------------------------------------------

    def db_now(self) -> datetime:
        return self.db.execute("SELECT now()").fetchone()[0]

    def match(self, want: Any, got: Any, *, now: Callable[[], datetime]) -> str | None:
        """``None`` when ``got`` (``_MISSING`` when absent) satisfies ``want``, else what differs."""
        if want is None:
            return None if got is _MISSING or got is None else f"wanted null, got {_dumps(got)}"
        if got is _MISSING and not _is_matcher(want):
            return f"wanted {_dumps(want)}, got nothing"
        return self._deep(want, None if got is _MISSING else got, now, "")

    def _deep(self, want: Any, got: Any, now: Callable[[], datetime], path: str) -> str | None:
        where = f" at {path}" if path else ""
        if _is_matcher(want):
            return self._matcher(want, got, now, where)
        if isinstance(want, bool) or want is None or isinstance(want, str):
            return (
                None
                if type(got) is type(want) and got == want
                else f"wanted {_dumps(want)}, got {_dumps(got)}{where}"
            )
        if isinstance(want, (int, float)):
            if isinstance(got, bool) or not isinstance(got, (int, float)) or float(got) != float(want):
                return f"wanted {_dumps(want)}, got {_dumps(got)}{where}"
            return None
        if isinstance(want, list):
            if not isinstance(got, list) or len(got) != len(want):
                return f"wanted {_dumps(want)}, got {_dumps(got)}{where}"
            for i, (w, g) in enumerate(zip(want, got)):
                problem = self._deep(w, g, now, f"{path}[{i}]")
                if problem:
                    return problem
            return None
        if isinstance(want, dict):
            if not isinstance(got, dict) or set(got) != set(want):
                return f"wanted {_dumps(want)}, got {_dumps(got)}{where}"
            for key in want:
                problem = self._deep(want[key], got[key], now, f"{path}.{key}" if path else key)
                if problem:
                    return problem
            return None
        raise RunnerError(f"unsupported expectation {want!r}")

    def _matcher(self, want: dict, got: Any, now: Callable[[], datetime], where: str) -> str | None:
        ((name, arg),) = want.items()
        if name == "$null":
            return None if got is None else f"wanted null, got {_dumps(got)}{where}"
        if name == "$notnull":
            return None if got is not None else f"wanted a value, got null{where}"
        if name in ("$id", "$checkpoint"):
            expected = self.uuid_of(arg) if name == "$id" else self.result_id(want)
            ok = isinstance(got, str) and got.lower() == expected
            return None if ok else f"wanted {name} {_dumps(arg)} = {expected}, got {_dumps(got)}{where}"
        if name == "$token":
            expected = self.claim_of(arg)["token"]
            return (
                None
                if got == expected
                else f"wanted the token of claim {arg!r} ({expected!r}), got {_dumps(got)}{where}"
            )
        if name in ("$future", "$past"):
            if got is None:
                return f"wanted a {'future' if name == '$future' else 'past'} time, got null{where}"
            try:
                moment = parse_moment(got)
            except ValueError as exc:
                return f"wanted a time, got {_dumps(got)} ({exc}){where}"
            reference = now()
            if name == "$future" and not moment > reference:
                return f"wanted a time after now ({reference.isoformat()}), got {_dumps(got)}{where}"
            if name == "$past" and moment > reference:
                return f"wanted a time not after now ({reference.isoformat()}), got {_dumps(got)}{where}"
            return None
        raise RunnerError(f"unknown matcher {name}")

    def subset(self, want: Any, got: Any, path: str) -> str | None:
        """Every key of ``want`` present in ``got`` and equal; nested objects recurse."""
        if isinstance(want, dict) and not _is_matcher(want):
            if not isinstance(got, dict):
                return f"wanted an object ⊇ {_dumps(want)} at {path}, got {_dumps(got)}"
            for key, value in want.items():
                if key not in got:
                    return f"missing {path}.{key} (have {_dumps(got)})"
                problem = self.subset(value, got[key], f"{path}.{key}")
                if problem:
                    return problem
            return None
        return self._deep(want, got, self.db_now, path)


def _is_matcher(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)) in MATCHERS


# --- running many --------------------------------------------------------------------------------


@dataclass
class Outcome:
    scenario: Scenario
    status: str  # passed | failed | skipped
    message: str = ""
    seconds: float = 0.0


def run_scenario(
    scenario: Scenario,
    drivers: dict[str, DriverProcess],
    dsn: str,
    events: EventValidator,
    *,
    log: Callable[[str], None] | None = None,
) -> Outcome:
    """Run one scenario; drivers that broke the protocol last time are restarted first."""
    started = time.monotonic()
    missing = scenario.drivers_named() - set(drivers)
    if missing:
        return Outcome(scenario, "skipped", f"needs driver(s) {', '.join(sorted(missing))}, not given")
    for driver in drivers.values():
        driver.ensure_running()
    try:
        ScenarioRun(scenario, drivers, dsn, events, log=log).run()
    except ScenarioSkipped as exc:
        return Outcome(scenario, "skipped", str(exc), time.monotonic() - started)
    except ScenarioFailed as exc:
        return Outcome(scenario, "failed", str(exc), time.monotonic() - started)
    return Outcome(scenario, "passed", "", time.monotonic() - started)


def parse_driver_option(text: str) -> tuple[str, str]:
    name, sep, command = text.partition("=")
    if not sep or not name or not command.strip():
        raise argparse.ArgumentTypeError(f"--driver takes name=command, got {text!r}")
    return name, command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.conformance.runner",
        description="Run the RunnerQ conformance scenarios against driver processes (SPEC.md section (g)).",
    )
    parser.add_argument(
        "--dsn",
        "-dsn",
        default=os.environ.get("RUNNERQ_TEST_DSN"),
        help="database the drivers open (default $RUNNERQ_TEST_DSN); scenarios use fresh cf_ queues in it",
    )
    parser.add_argument(
        "--spec", "-spec", type=Path, default=DEFAULT_SPEC, help=f"runnerq-spec root (default {DEFAULT_SPEC})"
    )
    parser.add_argument(
        "--scenarios",
        "-scenarios",
        type=Path,
        default=None,
        help="scenarios folder (default <spec>/conformance/scenarios)",
    )
    parser.add_argument(
        "--run", "-run", default=None, help="only scenarios whose relative path matches this regexp"
    )
    parser.add_argument(
        "--driver",
        "-driver",
        action="append",
        type=parse_driver_option,
        default=[],
        metavar="NAME=COMMAND",
        help="a driver, started with sh -c COMMAND (repeatable; the first is the default)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print every step as it runs")
    options = parser.parse_args(argv)

    if not options.dsn:
        parser.error("--dsn (or RUNNERQ_TEST_DSN) is required")
    if not options.driver:
        parser.error("at least one --driver name=command is required")
    names = [name for name, _ in options.driver]
    if len(set(names)) != len(names):
        parser.error(f"driver names must be distinct, got {names}")
    scenarios_dir = options.scenarios or options.spec / "conformance" / "scenarios"
    try:
        scenarios = discover(scenarios_dir, options.run)
        events = EventValidator(options.spec / "schema" / "postgres" / "events.schema.json")
    except (RunnerError, OSError, ValueError) as exc:
        print(f"setup error: {exc}", file=sys.stderr)
        return 2

    env = driver_env(options.dsn)
    drivers = {name: DriverProcess(name, command, env=env) for name, command in options.driver}
    log = (lambda message: print(message, flush=True)) if options.verbose else None
    counts = collections.Counter()
    try:
        for driver in drivers.values():
            driver.start()
        for scenario in scenarios:
            outcome = run_scenario(scenario, drivers, options.dsn, events, log=log)
            counts[outcome.status] += 1
            line = f"{outcome.status.upper():7} {scenario.rel} ({outcome.seconds:.2f} s)"
            if outcome.status == "skipped":
                line += f": {outcome.message}"
            print(line, flush=True)
            if outcome.status == "failed":
                print("  " + outcome.message.replace("\n", "\n  "), flush=True)
    finally:
        for driver in drivers.values():
            driver.stop()
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())

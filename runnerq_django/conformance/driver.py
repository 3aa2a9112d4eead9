"""The RunnerQ conformance driver: the spec's line protocol (SPEC.md section (g)) over the storage layer.

A conformance runner (ours in ``tests/conformance``, or the spec's Go runner) starts the driver
once per process and writes one JSON object per line, ``{"op": <op>, "args": {...}}``; the driver
answers each with exactly one line, ``{"ok": {...}}`` or
``{"error": {"kind": <storage error kind>, "message": <str>}}``. ``manage.py runnerq_driver`` runs
:func:`serve` on stdin/stdout; :class:`Driver` is the dispatch, usable in-process for tests.

Every state change goes through :mod:`runnerq_django.storage`; the driver only translates the
wire's arguments (names, defaults, JSON types) into the storage layer's records and back. The only
state kept between requests is the current queue and the database the Django connection points at.
"""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal, NoReturn, TextIO, overload

from runnerq_django.logs import log_event
from runnerq_django.storage import validation
from runnerq_django.storage.errors import ErrorKind, StorageError
from runnerq_django.storage.types import Claim, NewActivity, OnDuplicate

logger = logging.getLogger("runnerq_django.driver")  # its name from before the move: LOGGING configs name it

# Submit defaults of the conformance protocol (they differ from NewActivity's own defaults on
# purpose: a driver's activities must look the same whichever SDK's driver submitted them).
SUBMIT_DEFAULTS = {
    "priority": 2,
    "max_attempts": 3,
    "timeout_s": 30,
    "delay_s": 0,
}
RETRY_DELAY_SECONDS = 1  # "Retry base delay is 1 s" -- not a driver argument
MAX_RETRY_DELAY_SECONDS = 0  # 0 = the spec's 3600 s cap
CLAIM_LIMIT = 1
# Deeper than this, a request is refused before its op is read (the stored limit, MAX_JSON_DEPTH, is
# lower and checked by the storage layer); below what the default recursion limit lets json parse.
REQUEST_DEPTH_BOUND = 512
LEASE_MS = 30000
REAP_LIMIT = 100
CLEANUP_BATCH = 100
# Below the runner's 2-minute open timeout, so a held schema lock is answered with `timeout`.
OPEN_LOCK_TIMEOUT_SECONDS = 100.0
CHECKPOINT_STATES = {"ok": "Ok", "error": "Err"}


class ProtocolError(Exception):
    """A request the driver can't turn into a storage call; answered with ``kind``, never raised out."""

    def __init__(self, kind: ErrorKind, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


def _invalid(message: str) -> ProtocolError:
    return ProtocolError(ErrorKind.INVALID_ARGUMENT, message)


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


# --- argument readers: each names the field it refuses -------------------------------------------


class Args:
    """The ``args`` object of one request; every reader names the field it refuses, and
    :meth:`finish` refuses the fields nobody read (a misspelt argument must not silently default)."""

    def __init__(self, op: str, raw: dict[str, Any]):
        self.op = op
        self.raw = raw
        self.read: set[str] = set()

    def has(self, name: str) -> bool:
        return self.raw.get(name) is not None

    def get(self, name: str, default: Any = None) -> Any:
        self.read.add(name)
        value = self.raw.get(name)
        return default if value is None else value

    def require(self, name: str) -> Any:
        self.read.add(name)
        if self.raw.get(name) is None:
            raise _invalid(f"{self.op}: args.{name} is required")
        return self.raw[name]

    @overload
    def string(self, name: str, *, required: Literal[True]) -> str: ...

    @overload
    def string(self, name: str, default: str) -> str: ...

    @overload
    def string(self, name: str, default: str | None = None, *, required: bool = False) -> str | None: ...

    def string(self, name: str, default: str | None = None, *, required: bool = False) -> str | None:
        value = self.require(name) if required else self.get(name, default)
        if value is not None and not isinstance(value, str):
            raise _invalid(f"{self.op}: args.{name} must be a string, got {_json_type(value)}")
        return value

    def integer(self, name: str, default: int | None = None, *, required: bool = False) -> int | None:
        value = self.require(name) if required else self.get(name, default)
        if value is None:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or (isinstance(value, float) and not value.is_integer())
        ):
            raise _invalid(f"{self.op}: args.{name} must be a whole number, got {json.dumps(value)}")
        return int(value)

    def number(self, name: str, default: float | None = None) -> float | None:
        value = self.get(name, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _invalid(f"{self.op}: args.{name} must be a number, got {json.dumps(value)}")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        value = self.get(name, default)
        if not isinstance(value, bool):
            raise _invalid(f"{self.op}: args.{name} must be true or false, got {json.dumps(value)}")
        return value

    def uuid(self, name: str, *, required: bool = False) -> uuid.UUID | None:
        value = self.string(name, required=required)
        return None if value is None else _parse_uuid(f"{self.op}: args.{name}", value)

    def claim(self, name: str = "claim") -> Claim:
        value = self.require(name)
        if not isinstance(value, dict) or set(value) != {"id", "token"}:
            raise _invalid(
                f'{self.op}: args.{name} must be a claim object {{"id", "token"}} as claim returned it'
            )
        if not isinstance(value["token"], str) or not isinstance(value["id"], str):
            raise _invalid(f"{self.op}: args.{name}.id and .token must be strings")
        return Claim(_parse_uuid(f"{self.op}: args.{name}.id", value["id"]), value["token"])

    def optional_claim(self, name: str) -> Claim | None:
        return self.claim(name) if self.has(name) else self.get(name)

    def string_list(self, name: str) -> list[str] | None:
        value = self.get(name)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise _invalid(f"{self.op}: args.{name} must be a list of strings")
        return value

    def timestamp(self, name: str) -> datetime | None:
        value = self.string(name)
        if value is None:
            return None
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise _invalid(f"{self.op}: args.{name} must be an RFC 3339 timestamp, got {value!r}") from None
        if parsed.tzinfo is None:
            raise _invalid(f"{self.op}: args.{name} must carry a time zone offset (e.g. Z), got {value!r}")
        return parsed

    def finish(self) -> None:
        unknown = sorted(set(self.raw) - self.read)
        if unknown:
            raise _invalid(f"{self.op}: unknown argument(s) {', '.join(unknown)}")


def _parse_uuid(field: str, value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        raise _invalid(f"{field} must be a UUID, got {value!r}") from None


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", bool: "a boolean", str: "a string"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )


# --- the driver ----------------------------------------------------------------------------------


class Driver:
    """Dispatch of one driver process: ``handle_line(line) -> reply line`` (never raises)."""

    def __init__(self, *, using: str | None = None):
        self.using = using
        self.queue: str | None = None
        self.ops: dict[str, Callable[[Args], dict[str, Any]]] = {
            "open": self.op_open,
            "submit": self.op_submit,
            "claim": self.op_claim,
            "renew": self.op_renew,
            "complete": self.op_complete,
            "fail": self.op_fail,
            "checkpoint": self.op_checkpoint,
            "register_dependency": self.op_register_dependency,
            "park": self.op_park,
            "signal": self.op_signal,
            "lookup_key": self.op_lookup_key,
            "reap": self.op_reap,
            "cleanup": self.op_cleanup,
            "get_result": self.op_get_result,
        }

    @property
    def alias(self) -> str:
        if self.using:
            return self.using
        from runnerq_django import conf

        return conf.database_alias()

    # wire ---------------------------------------------------------------------------------------

    def handle_line(self, line: str) -> str:
        return encode_reply(self.handle(line))

    def handle(self, line: str) -> dict[str, Any]:
        """One request line to one reply object ``{"ok": {...}}`` or ``{"error": {...}}``."""
        try:
            op, args = parse_request(line)
            handler = self.ops.get(op)
            if handler is None:
                raise ProtocolError(
                    ErrorKind.UNSUPPORTED, f"unknown op {op!r} (known: {', '.join(sorted(self.ops))})"
                )
            if op != "open" and self.queue is None:
                raise ProtocolError(
                    ErrorKind.CONFIGURATION, f"{op}: no queue is open; send open {{dsn, queue}} first"
                )
            return {"ok": handler(Args(op, args))}
        except ProtocolError as exc:
            return _error(exc.kind, exc.message)
        except StorageError as exc:
            self._drop_broken_connection()
            return _error(exc.kind, exc.message)
        except Exception as exc:  # the protocol answers every line; the runner shows the message
            log_event(
                logger,
                logging.ERROR,
                "runnerq.driver.unexpected",
                "The conformance driver failed on a request; answering with an internal error.",
                exc_info=True,
            )
            self._drop_broken_connection()
            return _error(ErrorKind.INTERNAL, f"{type(exc).__name__}: {exc}")

    def _drop_broken_connection(self) -> None:
        """After a failed request, close the connection if it is no longer usable (what Django does
        at the end of a request), so a restarted server costs one error, not every later request."""
        try:
            from django.db import connections

            connection = connections[self.alias]
            if connection.connection is not None and not connection.in_atomic_block:
                connection.close_if_unusable_or_obsolete()
        except Exception:
            log_event(
                logger,
                logging.DEBUG,
                "runnerq.driver.close_failed",
                "Could not close a broken database connection.",
                exc_info=True,
            )

    # ops ----------------------------------------------------------------------------------------

    def op_open(self, args: Args) -> dict[str, Any]:
        dsn = args.string("dsn", required=True)
        queue = args.string("queue", required=True)
        args.finish()
        from django.core.management import call_command
        from django.db import connections

        from runnerq_django.schema.compare import SchemaMismatch
        from runnerq_django.schema.migrator import migrate_schema
        from runnerq_django.storage.db import database_errors

        self.queue = None  # a failed open leaves no queue open
        point_alias_at(self.alias, dsn)
        try:
            with database_errors():  # the storage layer's mapping: unreachable -> unavailable, ...
                ran = migrate_schema(connections[self.alias], lock_timeout=OPEN_LOCK_TIMEOUT_SECONDS)
                # The app's own tables (flow control's pauses and slots, which every claim reads;
                # the scheduler's and the console's), beside the spec's: Django's migrations of
                # this app, a no-op once applied. Output kept off stdout, which carries replies.
                call_command(
                    "migrate", "runnerq_django", database=self.alias, verbosity=0, stdout=io.StringIO()
                )
        except TimeoutError as exc:
            raise ProtocolError(ErrorKind.TIMEOUT, f"open: {exc}") from exc
        except SchemaMismatch as exc:
            raise ProtocolError(
                ErrorKind.CONFIGURATION, f"open: the database's RunnerQ schema is not usable: {exc}"
            ) from exc
        log_event(
            logger,
            logging.INFO,
            "runnerq.driver.open",
            "The conformance driver serves queue %(queue)r (schema migrated: %(migrated)s).",
            queue=queue,
            migrated=ran,
        )
        self.queue = queue
        return {}

    def op_submit(self, args: Args) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "id": args.uuid("id", required=True),
            "activity_type": args.string("type", required=True),
            "payload": args.get("payload"),
            "priority": args.integer("priority", SUBMIT_DEFAULTS["priority"]),
            "max_retries": args.integer("max_attempts", SUBMIT_DEFAULTS["max_attempts"]),
            "timeout_seconds": args.integer("timeout_s", SUBMIT_DEFAULTS["timeout_s"]),
            "delay_seconds": args.number("delay_s", SUBMIT_DEFAULTS["delay_s"]),
            "retry_delay_seconds": RETRY_DELAY_SECONDS,
            "max_retry_delay_seconds": MAX_RETRY_DELAY_SECONDS,
            "parent_id": args.uuid("parent"),
            "root_id": args.uuid("root"),
            "depth": args.integer("depth", 0),
        }
        metadata = args.get("metadata")
        if metadata is not None:
            if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
                raise _invalid("submit: args.metadata must be an object of string values")
            fields["metadata"] = metadata
        key = args.get("key")
        if key is not None:
            fields.update(_idempotency(key))
        fence = args.optional_claim("fence")
        args.finish()
        result = storage("submit")(self.queue, NewActivity(**fields), fence=fence, using=self.using)
        return {} if result.created else {"existing": str(result.id)}

    def op_claim(self, args: Args) -> dict[str, Any]:
        types = args.string_list("types")
        limit = args.integer("limit", CLAIM_LIMIT)
        lease_ms = args.integer("lease_ms", LEASE_MS)
        args.finish()
        claimed = storage("claim")(self.queue, types=types, limit=limit, lease_ms=lease_ms, using=self.using)
        return {"claims": [{"id": str(item.id), "token": item.token} for item in claimed]}

    def op_renew(self, args: Args) -> dict[str, Any]:
        claim = args.claim()
        lease_ms = args.integer("lease_ms", LEASE_MS)
        args.finish()
        return {"renewed": bool(storage("renew")(self.queue, claim, lease_ms, using=self.using))}

    def op_complete(self, args: Args) -> dict[str, Any]:
        claim = args.claim()
        value = args.get("value")
        args.finish()
        storage("complete")(self.queue, claim, value, using=self.using)
        return {}

    def op_fail(self, args: Args) -> dict[str, Any]:
        claim = args.claim()
        reason = args.string("reason", "")
        retryable = args.boolean("retryable", True)
        args.finish()
        outcome = storage("fail")(self.queue, claim, reason, retryable=retryable, using=self.using)
        return {"outcome": str(getattr(outcome, "value", outcome))}

    def op_checkpoint(self, args: Args) -> dict[str, Any]:
        claim = args.claim()
        result_id = args.uuid("result_id", required=True)
        state = args.string("state", "ok")
        if state not in CHECKPOINT_STATES:
            raise _invalid(
                f"checkpoint: args.state must be one of {', '.join(CHECKPOINT_STATES)}, got {state!r}"
            )
        data = args.get("data")
        step = args.string("step", required=True)
        args.finish()
        storage("checkpoint")(
            self.queue,
            claim,
            result_id,
            state=CHECKPOINT_STATES[state],
            data=data,
            step=step,
            using=self.using,
        )
        return {}

    def op_register_dependency(self, args: Args) -> dict[str, Any]:
        claim = args.claim()
        producer = args.uuid("producer", required=True)
        args.finish()
        storage("register_dependency")(self.queue, claim, producer, using=self.using)
        return {}

    def op_park(self, args: Args) -> dict[str, Any]:
        claim = args.claim()
        kind = args.string("kind", required=True)
        if kind not in ("sleep", "signal", "await"):
            raise _invalid(f"park: args.kind must be sleep, signal or await, got {kind!r}")
        step = args.string("step", required=True)
        wake_at = args.timestamp("wake_at")
        result_id = args.uuid("result_id")
        producer = args.uuid("producer")
        args.finish()
        if kind == "sleep" and wake_at is None:
            raise _invalid("park: args.wake_at is required for a sleep")
        if kind != "sleep" and result_id is None:
            raise _invalid(f"park: args.result_id is required for kind {kind}")
        storage("park")(
            self.queue,
            claim,
            kind=kind,
            step=step,
            wake_at=wake_at,
            result_id=result_id,
            producer_id=producer,
            using=self.using,
        )
        return {}

    def op_signal(self, args: Args) -> dict[str, Any]:
        target = args.uuid("target", required=True)
        name = args.string("name", required=True)
        payload = args.get("payload")
        args.finish()
        storage("signal")(self.queue, target, name, payload, using=self.using)
        return {}

    def op_lookup_key(self, args: Args) -> dict[str, Any]:
        key = args.string("key", required=True)
        args.finish()
        return {"id": str(storage("lookup_key")(self.queue, key, using=self.using))}

    def op_reap(self, args: Args) -> dict[str, Any]:
        limit = args.integer("limit", REAP_LIMIT)
        args.finish()
        return {"count": int(storage("reap")(self.queue, limit, using=self.using))}

    def op_cleanup(self, args: Args) -> dict[str, Any]:
        completed_s = args.integer("completed_s", 0)
        failed_s = args.integer("failed_s", 0)
        events_s = args.integer("events_s", 0)
        batch = args.integer("batch", CLEANUP_BATCH)
        args.finish()
        count = storage("cleanup")(
            self.queue,
            completed_s=completed_s,
            failed_s=failed_s,
            events_s=events_s,
            batch=batch,
            using=self.using,
        )
        return {"count": int(count)}

    def op_get_result(self, args: Args) -> dict[str, Any]:
        result_id = args.uuid("id", required=True)
        args.finish()
        stored = storage("get_result")(self.queue, result_id, using=self.using)
        if stored is None:
            return {"result": None}
        return {"result": {"state": stored.state, "data": stored.data, "serialization": stored.serialization}}


def storage(name: str) -> Callable[..., Any]:
    """The storage operation ``name``: exported by ``runnerq_django.storage`` or, failing that,
    defined in its ``operations`` module (the contract names both)."""
    import importlib

    package = importlib.import_module("runnerq_django.storage")
    operation = getattr(package, name, None)
    if operation is None:
        try:
            operation = getattr(importlib.import_module("runnerq_django.storage.operations"), name, None)
        except ImportError as exc:
            raise ProtocolError(ErrorKind.UNSUPPORTED, f"the storage layer is not available: {exc}") from exc
    if not callable(operation):
        raise ProtocolError(ErrorKind.UNSUPPORTED, f"the storage layer has no operation {name}")
    found: Callable[..., Any] = operation
    return found


def _idempotency(key: Any) -> dict[str, Any]:
    if (
        not isinstance(key, dict)
        or not set(key) <= {"key", "on_duplicate"}
        or not isinstance(key.get("key"), str)
    ):
        raise _invalid('submit: args.key must be an object {"key": <string>, "on_duplicate": <policy>}')
    policy = key.get("on_duplicate") or "return_existing"
    try:
        on_duplicate = OnDuplicate[policy.upper()] if isinstance(policy, str) else None
    except KeyError:
        on_duplicate = None
    if on_duplicate is None:
        names = ", ".join(member.name.lower() for member in OnDuplicate)
        raise _invalid(f"submit: args.key.on_duplicate must be one of {names}, got {json.dumps(policy)}")
    return {"idempotency_key": key["key"], "on_duplicate": on_duplicate}


def _error(kind: ErrorKind, message: str) -> dict[str, Any]:
    return {"error": {"kind": ErrorKind(kind).wire_name, "message": str(message)}}


def parse_request(line: str) -> tuple[str, dict[str, Any]]:
    try:
        request = json.loads(line, parse_constant=_reject_constant)
        # Where the parser stops depends on sys.getrecursionlimit(), which a library may have
        # raised: a request deeper than the default limit allows is refused in every process.
        validation.json_depth("request", request, REQUEST_DEPTH_BOUND)
    except ValueError as exc:
        raise _invalid(f"request is not a JSON object: {exc}") from None
    except (RecursionError, StorageError):  # values are held to the storage layer's depth
        raise _invalid(validation.too_deep("request", validation.max_json_depth()).message) from None
    if not isinstance(request, dict):
        raise _invalid(f"request must be a JSON object, got {_json_type(request)}")
    unknown = set(request) - {"op", "args"}
    if unknown:
        raise _invalid(f"request has unknown key(s) {', '.join(sorted(unknown))}; expected op and args")
    op = request.get("op")
    if not isinstance(op, str) or not op:
        raise _invalid('request needs "op": a non-empty string')
    args = request.get("args")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise _invalid(f"{op}: args must be a JSON object, got {_json_type(args)}")
    return op, args


def encode_reply(reply: dict[str, Any]) -> str:
    try:
        return json.dumps(reply, separators=(",", ":"), allow_nan=False, default=_json_default)
    except (TypeError, ValueError) as exc:
        return json.dumps(_error(ErrorKind.SERIALIZATION, f"reply is not JSON: {exc}"))


def _json_default(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# --- pointing the Django connection at the DSN of `open` -----------------------------------------


def connection_params(dsn: str) -> dict[str, Any]:
    """The Django ``DATABASES`` fields for a libpq DSN (URL or ``key=value``; sockets included)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(dsn)
    except Exception as exc:  # psycopg.ProgrammingError for a malformed conninfo
        raise _invalid(f"open: args.dsn is not a libpq connection string: {exc}") from None
    return {
        "NAME": params.pop("dbname", None) or "postgres",
        "USER": params.pop("user", ""),
        "PASSWORD": params.pop("password", ""),
        "HOST": params.pop("host", ""),
        "PORT": str(params.pop("port", "") or ""),
        "OPTIONS": params,
    }


def point_alias_at(alias: str, dsn: str) -> bool:
    """Point the Django connection ``alias`` at ``dsn``; returns whether it changed.

    The other settings of the alias (engine, time zone, CONN_MAX_AGE, ...) stay. When the DSN
    names the database the alias already uses, the connection is kept as it is.
    """
    from django.conf import settings
    from django.db import connections

    wanted = connection_params(dsn)
    current = connections.settings[alias]
    if all(_same(current.get(key), value) for key, value in wanted.items()):
        return False
    connections[alias].close()
    updated = {**current, **wanted, "OPTIONS": {**wanted["OPTIONS"]}}
    connections.settings[alias] = updated
    if alias in settings.DATABASES:
        settings.DATABASES[alias] = updated
    del connections[alias]  # the next access builds a new wrapper from the updated settings
    return True


def _same(have: Any, want: Any) -> bool:
    if isinstance(want, dict):
        return {k: str(v) for k, v in (have or {}).items()} == {k: str(v) for k, v in want.items()}
    return str(have or "") == str(want or "")


# --- the process loop ----------------------------------------------------------------------------


def serve(stdin: TextIO, stdout: TextIO, driver: Driver | None = None) -> int:
    """Answer each line of ``stdin`` with one line on ``stdout`` until EOF; returns the requests served."""
    driver = driver or Driver()
    served = 0
    for line in stdin:
        reply = driver.handle_line(line.rstrip("\r\n"))
        stdout.write(reply + "\n")
        stdout.flush()
        served += 1
    return served


__all__ = ["Driver", "ProtocolError", "connection_params", "parse_request", "point_alias_at", "serve"]

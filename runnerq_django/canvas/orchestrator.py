"""The canvas orchestrator: the built-in ``runnerq.canvas`` handler that runs a canvas (built
with ``runnerq_django.canvas.builder``) as a durable workflow. It drives the handler's context
(``runnerq_django.worker.context.Context``) through ``OrchestratorContext``, the part of it it
uses, so it imports nothing of the worker, and the context (which builds canvases for
``ctx.group(...)``) imports the builder, never this module.

Internal: not part of the public API.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeAlias

from runnerq_django import conf
from runnerq_django.activities.registry import ActivityDefinition, ActivityOptions, AnyActivity, registry
from runnerq_django.canvas.builder import (
    _UNSET,
    CANVAS_TYPE,
    COLLECT,
    FAIL_FAST,
    MEMBER_OPTIONS,
    CanvasFailed,
)
from runnerq_django.exceptions import ActivityFailed, NonRetryableError

if TYPE_CHECKING:
    from runnerq_django.activities.nouns import ActivityHandle, ParkRequest
    from runnerq_django.storage.types import Claim, StoredResult

    AnyHandle: TypeAlias = ActivityHandle[Any]


class OrchestratorContext(Protocol):
    """What the orchestrator uses of the handler's ``Context`` (which is one): the activity's
    identity, its claim, checkpoints, the inline-wait budget and the park."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def queue(self) -> str: ...
    @property
    def root_id(self) -> uuid.UUID: ...
    @property
    def depth(self) -> int: ...
    @property
    def claim(self) -> Claim: ...

    using: str | None

    def now(self) -> datetime: ...
    def _check_live(self) -> None: ...
    def _inline_budget(self) -> float: ...
    def _park(self, request: ParkRequest) -> NoReturn: ...
    def _stored(self, result_id: uuid.UUID) -> StoredResult | None: ...
    def _checkpoint(self, result_id: uuid.UUID, step: str, state: str, data: Any) -> None: ...


_MEMBER_NAMESPACE = uuid.UUID("6f1d3c2e-5b7a-4e0f-9c61-2a8d4b9e7c10")
_READ_PAGE = 1000  # the same as context.RESULTS_PAGE


def orchestrate(ctx: OrchestratorContext, payload: Any) -> Any:
    """Run one canvas node (the built-in ``runnerq.canvas`` handler). Replays from the top on
    every wake; spawns and results are found again, never repeated."""
    if not isinstance(payload, dict) or not isinstance(payload.get("canvas"), dict):
        raise NonRetryableError(
            f"{CANVAS_TYPE} payload must be an object with a 'canvas' object, got {payload!r}"
        )
    return _Run(ctx).run(payload["canvas"], "c", payload.get("input"), "input" in payload)


# Registered at import (the app's ready() imports this module): every worker runs canvases.
# More attempts than the default: an orchestrator attempt only spawns and reads, so a failed
# one is the database or the worker, worth retrying.
ORCHESTRATOR: AnyActivity = registry.register(
    ActivityDefinition(orchestrate, CANVAS_TYPE, ActivityOptions(max_attempts=10))
)


@dataclass(frozen=True)
class _Member:
    """One child to spawn: its type, payload and enqueue options."""

    activity_type: str
    payload: Any
    options: Mapping[str, Any]
    label: str


def _label(node: Mapping[str, Any]) -> str:
    for kind in ("chain", "group", "map", "chord"):
        if kind in node:
            return kind
    return str(node.get("type"))


class _Run:
    def __init__(self, ctx: OrchestratorContext):
        self.ctx = ctx

    def run(self, node: Mapping[str, Any], path: str, given: Any, has_input: bool) -> Any:
        if "chain" in node:
            return self.chain(node["chain"], path, given, has_input)
        if "group" in node or "map" in node:
            return self.group(node, path, given, has_input)
        if "chord" in node:
            results = self.group(node["chord"], f"{path}.g", given, has_input)
            return self.one(node["callback"], f"{path}.cb", results, "chord callback")
        if "type" in node:
            return self.one(node, f"{path}.t", given if has_input else None, "task")
        raise NonRetryableError(f"unknown canvas node at {path}: {node!r}")

    def chain(self, members: Sequence[Mapping[str, Any]], path: str, given: Any, has_input: bool) -> Any:
        value, receives = given, has_input
        for i, node in enumerate(members):
            value = self.one(node, f"{path}.{i}", value if receives else None, f"chain member {i}")
            receives = True
        return value

    def one(self, node: Mapping[str, Any], path: str, given: Any, what: str) -> Any:
        labels = [f"{what} ({_label(node)})"]
        [handle] = self.spawn(path, [_member(node, given)], labels)
        [outcome] = self.await_all(path, [handle], fail_fast=True, what=labels)
        return outcome

    def group(self, node: Mapping[str, Any], path: str, given: Any, has_input: bool) -> list[Any]:
        value = given if has_input else None
        members: list[_Member]
        if "map" in node:
            template = node["map"]
            base = template.get("payload", {})
            if node.get("star"):
                members = [_member(template, None, payload={**base, **item}) for item in node["items"]]
            else:
                members = [_member(template, None, payload=item) for item in node["items"]]
        else:
            members = [_member(member, value) for member in node["group"]]
        limit = conf.runnerq_settings().max_canvas_members
        if len(members) > limit:  # a canvas built elsewhere: Canvas refuses these when built
            raise NonRetryableError(
                f"the group at {path} has {len(members)} members, more than "
                f"RUNNERQ['MAX_CANVAS_MEMBERS'] ({limit}) spawned in one transaction"
            )
        labels = [f"group member {i} ({member.label})" for i, member in enumerate(members)]
        handles = self.spawn(path, members, labels)
        fail_fast = node.get("on_failure", FAIL_FAST) != COLLECT
        return self.await_all(path, handles, fail_fast=fail_fast, what=labels)

    # spawning ------------------------------------------------------------------------------------

    def spawn(self, path: str, members: list[_Member], labels: list[str]) -> list[AnyHandle]:
        """Submit the members as children in one fenced bulk submit, once: a checkpoint records
        it, and the ids are derived from the path, so a replay rebuilds the same handles. A
        member its enqueue refuses (an input over the payload limit, say) fails the canvas for
        good, naming it (``labels``): it would be refused on every retry."""
        from runnerq_django import storage
        from runnerq_django.activities.nouns import ActivityHandle
        from runnerq_django.client import build_activity, count_enqueued
        from runnerq_django.spec.keys import checkpoint_id
        from runnerq_django.storage import errors

        ctx = self.ctx
        ctx._check_live()
        ids = [uuid.uuid5(_MEMBER_NAMESPACE, f"{ctx.id}/{path}/{i}") for i in range(len(members))]
        handles: list[AnyHandle] = [
            ActivityHandle(id, ctx.queue, step=f"{path}/{i}", using=ctx.using) for i, id in enumerate(ids)
        ]
        marker = checkpoint_id(ctx.id, "run", f"canvas:{path}")
        if ctx._stored(marker) is not None:
            return handles
        new = []
        for member, id, label in zip(members, ids, labels):
            options = member.options
            if not isinstance(options, Mapping) or not set(options) <= set(MEMBER_OPTIONS):
                raise CanvasFailed(
                    f"{label} can't be enqueued: its options must be member options, got {options!r}"
                )
            try:
                new.append(
                    build_activity(
                        member.activity_type,
                        member.payload,
                        queue=ctx.queue,
                        id=id,
                        parent_id=ctx.id,
                        root_id=ctx.root_id,
                        depth=ctx.depth + 1,
                        **options,
                    )[1]
                )
            except errors.InvalidArgument as exc:
                raise CanvasFailed(f"{label} can't be enqueued: {exc}") from None
        try:
            results = storage.submit_many(ctx.queue, new, fence=ctx.claim, using=ctx.using)
            count_enqueued(ctx.queue, results)
        except errors.Conflict:
            # An earlier attempt submitted them (all or nothing: one transaction) and ended
            # before its checkpoint: they are ours, carry on. A Conflict of another kind (a
            # concurrent transaction's) left nothing: raise it, the attempt is retried.
            if not _exists(ids[0], ctx.using):
                raise
        ctx._checkpoint(marker, f"run:canvas:{path}", "Ok", {"members": len(members)})
        return handles

    # awaiting ------------------------------------------------------------------------------------

    def await_all(
        self, path: str, handles: list[AnyHandle], *, fail_fast: bool, what: list[str]
    ) -> list[Any]:
        """The members' values in order (``fail_fast``) or outcomes (collect). Parks on the last
        unfinished member: members are claimed about in submission order, so that one finishes
        about last and the orchestrator wakes about once for the whole group."""
        from runnerq_django.activities.nouns import WAIT_FOREVER_RECHECK, ParkRequest

        ctx = self.ctx
        ids = [handle.id for handle in handles]
        found = self.read(ids)
        if len(found) < len(ids) and not (fail_fast and _any_failed(found)) and ctx._inline_budget() > 0:
            found.update(self.poll([i for i in ids if i not in found], fail_fast))
        if fail_fast:
            for i, handle in enumerate(handles):
                stored = found.get(handle.id)
                if stored is not None and not stored.ok:
                    self.cancel([h.id for h in handles if h.id not in found], path)
                    raise CanvasFailed(f"{what[i]} failed: {_failure(handle.id, stored).error}")
        missing = [handle for handle in handles if handle.id not in found]
        if missing:
            last = missing[-1]
            ctx._park(
                ParkRequest(
                    "await",
                    f"child:canvas:{last.step}",
                    ctx.now() + WAIT_FOREVER_RECHECK,
                    result_id=last.id,
                    producer_id=last.id,
                )
            )
        if fail_fast:
            return [_value(handle.id, found[handle.id]) for handle in handles]
        return [_outcome(handle.id, found[handle.id]) for handle in handles]

    def read(self, ids: list[uuid.UUID]) -> dict[uuid.UUID, StoredResult]:
        from runnerq_django import storage

        found: dict[uuid.UUID, StoredResult] = {}
        for start in range(0, len(ids), _READ_PAGE):
            page = ids[start : start + _READ_PAGE]
            found.update(storage.get_results(self.ctx.queue, page, using=self.ctx.using))
        return found

    def poll(self, ids: list[uuid.UUID], fail_fast: bool) -> dict[uuid.UUID, StoredResult]:
        """Short in-process wait for fast members before paying for a park and a replay."""
        import time

        deadline = time.monotonic() + self.ctx._inline_budget()
        pause = 0.005
        found: dict[uuid.UUID, StoredResult] = {}
        while time.monotonic() < deadline:
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            self.ctx._check_live()
            found.update(self.read([i for i in ids if i not in found]))
            if len(found) == len(ids) or (fail_fast and _any_failed(found)):
                break
            pause = min(pause * 2, 0.25)
        return found

    def cancel(self, ids: list[uuid.UUID], path: str) -> None:
        """Fail fast: the members still unfinished are cancelled (and their descendants)."""
        from runnerq_django.storage import commands

        for start in range(0, len(ids), _READ_PAGE):
            commands.cancel(
                self.ctx.queue,
                ids[start : start + _READ_PAGE],
                cascade=True,
                reason=f"canvas {self.ctx.id} ({path}) failed fast",
                using=self.ctx.using,
            )


def _member(node: Mapping[str, Any], given: Any, *, payload: Any = _UNSET) -> _Member:
    """The child that runs ``node``: a leaf as its own type; a nested canvas as an orchestrator."""
    if "type" in node:
        if payload is _UNSET:
            payload = node.get("payload", given)
        return _Member(str(node["type"]), payload, node.get("options", {}), str(node["type"]))
    return _Member(CANVAS_TYPE, {"canvas": dict(node), "input": given}, {}, _label(node))


def _exists(activity_id: uuid.UUID, using: str | None) -> bool:
    from runnerq_django import conf
    from runnerq_django.models import Activity

    return bool(Activity.objects.using(using or conf.database_alias()).filter(id=activity_id).exists())


def _any_failed(found: Mapping[uuid.UUID, StoredResult]) -> bool:
    return any(not stored.ok for stored in found.values())


def _failure(activity_id: uuid.UUID, stored: StoredResult) -> ActivityFailed:
    from runnerq_django.spec.serialization import plain_json

    return ActivityFailed(activity_id, plain_json(stored.data, stored.serialization))


def _value(activity_id: uuid.UUID, stored: StoredResult) -> Any:
    from runnerq_django.client import unwrap

    return unwrap(activity_id, stored)


def _outcome(activity_id: uuid.UUID, stored: StoredResult) -> dict[str, Any]:
    if stored.ok:
        return {"ok": True, "value": _value(activity_id, stored)}
    failure = _failure(activity_id, stored)
    return {"ok": False, "error": failure.error, "type": failure.kind}

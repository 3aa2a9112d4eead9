"""The canvas structures (chain, group, chord, map, starmap, signature), each checked as it is
built: what ``runnerq_django.canvas`` exports.

Internal: not part of the public API; import the names from ``runnerq_django.canvas``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias, cast

from runnerq_django import conf
from runnerq_django.activities import arguments
from runnerq_django.activities.registry import ActivityDefinition, install_signature, registry
from runnerq_django.exceptions import NonRetryableError

if TYPE_CHECKING:
    from runnerq_django.activities.nouns import ActivityHandle, CanvasMember, CanvasPart, SignsMembers

    # Any handler, any handle: the one place to change when their generic parameters change.
    AnyDefinition: TypeAlias = ActivityDefinition[..., Any]
    AnyHandle: TypeAlias = ActivityHandle[Any]
    # What the canvas functions take: a canvas, a handler (its .s()), or a member (what .s() returns).
    Part: TypeAlias = "CanvasPart | SignsMembers"

# The public names are runnerq_django.canvas's (its __all__).

# The orchestrator's activity type. Reserved: a handler of this name elsewhere would take
# canvases it cannot run.
CANVAS_TYPE = "runnerq.canvas"
FAIL_FAST = "fail_fast"
COLLECT = "collect"
ON_FAILURE = (FAIL_FAST, COLLECT)
# Per-member options a signature may carry (enqueue's, less those a tree decides: the queue is
# the canvas's, ids and idempotency come from the orchestrator).
MEMBER_OPTIONS = (
    "priority",
    "max_attempts",
    "timeout",
    "retry_delay",
    "max_retry_delay",
    "metadata",
    "delay",
)
# Ids of members: uuid5(orchestrator id / path / position), stable across replays.
# storage.get_results reads at most this many ids per call (the protocol's batch bound).
# Levels of canvases nested in canvases. Each is an orchestrator of its own and two or three
# levels of the canvas's JSON, which RUNNERQ['MAX_JSON_DEPTH'] (64) bounds as a whole anyway.
MAX_NESTING = 16


class CanvasFailed(NonRetryableError):
    """A member failed (a chain's, or a fail-fast group's): the orchestrator's error names the
    member and carries its error. Non-retryable: the member's failure is stored."""


class _Unset:
    def __repr__(self) -> str:
        return "<no payload>"


_UNSET = _Unset()


class Canvas:
    """What :func:`chain`, :func:`group`, :func:`chord`, :func:`map` and :func:`starmap` build;
    ``enqueue`` runs it and returns the orchestrator's handle, whose ``result()`` /
    ``aresult()`` is the canvas's final value."""

    kind: ClassVar[str] = "canvas"
    # Set when built (_measure): the members it spawns in all, and how many canvases deep it
    # nests (a Signature: one member, no nesting).
    size: ClassVar[int] = 1
    nesting: ClassVar[int] = 0

    def node(self) -> dict[str, Any]:
        """The canvas as the orchestrator's JSON."""
        raise NotImplementedError

    def leaves(self) -> Iterable[Signature]:
        raise NotImplementedError

    def _check_receives(self, where: str) -> None:
        """Refuse a member with its own payload where an input arrives (it would be dropped)."""
        raise NotImplementedError

    def enqueue(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        idempotency_key: str | None = None,
        metadata: dict[str, str] | None = None,
        delay: Any = None,
        using: str | None = None,
    ) -> AnyHandle:
        """Enqueue the orchestrator (joins the caller's transaction). The queue defaults to the
        first member's; every member runs there, since an activity tree lives in one queue."""
        from runnerq_django import client

        return client.enqueue(
            CANVAS_TYPE,
            {"canvas": self.node()},
            queue=queue if queue is not None else self._default_queue(),
            priority=priority,
            idempotency_key=idempotency_key,
            metadata=metadata,
            delay=delay,
            using=using,
        )

    def __or__(self, other: Part) -> Chain:
        """``a.s(x) | b.s() | c.s()`` is ``chain(a.s(x), b.s(), c.s())``."""
        head = self.members if isinstance(self, Chain) else (self,)
        tail = other.members if isinstance(other, Chain) else (other,)
        return chain(*head, *tail)

    async def aenqueue(self, **options: Any) -> AnyHandle:
        from asgiref.sync import sync_to_async

        return await sync_to_async(lambda: self.enqueue(**options), thread_sensitive=True)()

    def _default_queue(self) -> str | None:

        for leaf in self.leaves():
            definition = registry.get(leaf.activity_type)
            return definition.options.queue if definition is not None else None
        return None


@dataclass(frozen=True)
class Signature(Canvas):
    """One member: an activity type, its payload (or none: it receives its input) and options."""

    kind: ClassVar[str] = "task"
    activity_type: str
    payload: Any = _UNSET
    immutable: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Check the member as its enqueue would, naming the field: a ``Signature`` built by
        hand is refused here too, not by its orchestrator when it runs."""
        from runnerq_django import client

        if self.activity_type == CANVAS_TYPE:
            raise arguments.invalid("activity", f"{CANVAS_TYPE} is the orchestrator: nest a canvas instead")
        if not isinstance(self.options, Mapping):
            raise arguments.invalid("options", f"must be a mapping of member options, got {self.options!r}")
        for name in self.options:
            if name not in MEMBER_OPTIONS:
                raise arguments.invalid(
                    str(name),
                    f"is not a member option (one of {', '.join(MEMBER_OPTIONS)}; the queue is the canvas's)",
                )
        client.build_activity(
            self.activity_type, None if self.receives_input else self.payload, **self.options
        )
        arguments.json_value(dict(self.options), "options")

    @property
    def receives_input(self) -> bool:
        return self.payload is _UNSET

    def node(self) -> dict[str, Any]:
        node: dict[str, Any] = {"type": self.activity_type}
        if not self.receives_input:
            node["payload"] = self.payload
        if self.options:
            node["options"] = dict(self.options)
        return node

    def leaves(self) -> Iterable[Signature]:
        yield self

    def _check_receives(self, where: str) -> None:
        if not self.receives_input and not self.immutable:
            raise arguments.invalid(
                where,
                f"{self.activity_type} has its own payload where it receives an input: use .si(payload) "
                "to drop the input, or .s() to receive it",
            )


def signature(
    activity: AnyDefinition | str, payload: Any = _UNSET, *, immutable: bool = False, **options: Any
) -> Signature:
    """A member for a canvas: ``handler.s(...)`` spelled as a function, and the way to name a
    type another language handles (``signature("emails.send", {...})``)."""
    from runnerq_django import client

    type_name, _ = client.resolve(activity)
    options = {name: _seconds_if_timedelta(value) for name, value in options.items()}
    return Signature(type_name, payload, immutable, options)  # which checks it


def _seconds_if_timedelta(value: Any) -> Any:
    from datetime import timedelta

    return value.total_seconds() if isinstance(value, timedelta) else value


@dataclass(frozen=True)
class Chain(Canvas):
    """Members run one after the other, each receiving the previous one's result."""

    kind: ClassVar[str] = "chain"
    members: tuple[Canvas, ...]

    def __post_init__(self) -> None:
        _measure(self, [(f"members[{i}]", member) for i, member in enumerate(self.members)])

    def node(self) -> dict[str, Any]:
        return {"chain": [member.node() for member in self.members]}

    def leaves(self) -> Iterable[Signature]:
        for member in self.members:
            yield from member.leaves()

    def _check_receives(self, where: str) -> None:
        self.members[0]._check_receives(f"{where}[0]")


@dataclass(frozen=True)
class Group(Canvas):
    """Members run in parallel; the result is their results in order (``on_failure``)."""

    kind: ClassVar[str] = "group"
    members: tuple[Canvas, ...] = ()
    on_failure: str = FAIL_FAST
    # map / starmap: one signature over items, stored compactly (10,000 members, one template).
    template: Signature | None = None
    items: tuple[Any, ...] = ()
    star: bool = False

    def __post_init__(self) -> None:
        if self.template is not None:
            _measure(self, [], items=len(self.items))
        else:
            _measure(self, [(f"members[{i}]", member) for i, member in enumerate(self.members)])

    def node(self) -> dict[str, Any]:
        if self.template is not None:
            return {
                "map": self.template.node(),
                "items": list(self.items),
                "star": self.star,
                "on_failure": self.on_failure,
            }
        return {"group": [member.node() for member in self.members], "on_failure": self.on_failure}

    def leaves(self) -> Iterable[Signature]:
        if self.template is not None:
            yield self.template
        for member in self.members:
            yield from member.leaves()

    def _check_receives(self, where: str) -> None:
        for i, member in enumerate(self.members):
            member._check_receives(f"{where}[{i}]")


@dataclass(frozen=True)
class Chord(Canvas):
    """A group, then ``callback`` receiving the list of the group's results."""

    kind: ClassVar[str] = "chord"
    header: Group
    callback: Canvas

    def __post_init__(self) -> None:
        _measure(self, [("group", self.header), ("callback", self.callback)])

    def node(self) -> dict[str, Any]:
        return {"chord": self.header.node(), "callback": self.callback.node()}

    def leaves(self) -> Iterable[Signature]:
        yield from self.header.leaves()
        yield from self.callback.leaves()

    def _check_receives(self, where: str) -> None:
        self.header._check_receives(f"{where}.group")


def _measure(canvas: Canvas, parts: list[tuple[str, Canvas]], *, items: int = 0) -> None:
    """Set ``canvas``'s size and nesting from its parts' (``items``: a map's), refusing a canvas
    past ``MAX_NESTING`` (naming the part) or ``RUNNERQ['MAX_CANVAS_MEMBERS']``."""
    size, nesting = items, 1
    for where, part in parts:
        if part.nesting >= MAX_NESTING:
            raise arguments.invalid(
                where,
                f"nests canvases more than {MAX_NESTING} deep (canvas.MAX_NESTING): each level is "
                "an orchestrator of its own; flatten it (a | b joins two chains into one)",
            )
        size += part.size
        nesting = max(nesting, part.nesting + 1)
    limit = conf.runnerq_settings().max_canvas_members
    if size > limit:
        raise arguments.invalid(
            "items" if items else "members",
            f"a canvas may have at most {limit} members in all (RUNNERQ['MAX_CANVAS_MEMBERS']; "
            f"its orchestrator spawns a group in one transaction), this one would have {size}",
        )
    object.__setattr__(canvas, "size", size)  # frozen: set once, here
    object.__setattr__(canvas, "nesting", nesting)


def _canvas(value: Any, field_name: str) -> Canvas:
    if isinstance(value, Canvas):
        return value
    if isinstance(value, ActivityDefinition):
        return signature(value)
    raise arguments.invalid(field_name, f"must be a signature (handler.s(...)) or a canvas, got {value!r}")


def _on_failure(value: str) -> str:
    if value not in ON_FAILURE:
        raise arguments.invalid("on_failure", f"must be one of {', '.join(ON_FAILURE)}, got {value!r}")
    return value


def chain(*members: Part) -> Chain:
    """``chain(a.s(x), b.s(), c.s())``: ``c(b(a(x)))``, each member a durable child."""
    if not members:
        raise arguments.invalid("members", "a chain needs at least one member")
    built = tuple(_canvas(member, f"members[{i}]") for i, member in enumerate(members))
    for i, member in enumerate(built[1:], start=1):
        member._check_receives(f"members[{i}]")
    return Chain(built)


def group(members: Iterable[Part], *, on_failure: str = FAIL_FAST) -> Group:
    """``group([a.s(1), b.s(2)])``: run in parallel; the result lists theirs in order."""
    built = tuple(_canvas(member, f"members[{i}]") for i, member in enumerate(members))
    if not built:
        raise arguments.invalid("members", "a group needs at least one member")
    return Group(built, _on_failure(on_failure))


def chord(
    header: Group | Iterable[Part],
    callback: Part,
    *,
    on_failure: str | None = None,
) -> Chord:
    """``chord(group([...]), total.s())``: the callback receives the list of the group's results.
    ``on_failure`` overrides the group's."""
    built = header if isinstance(header, Group) else group(header)
    if on_failure is not None:
        built = Group(built.members, _on_failure(on_failure), built.template, built.items, built.star)
    body = _canvas(callback, "callback")
    body._check_receives("callback")
    return Chord(built, body)


def map(task: CanvasMember | AnyDefinition, items: Iterable[Any], *, on_failure: str = FAIL_FAST) -> Group:
    """A group running ``task`` once per item, the item as its payload."""
    return _mapped(task, items, on_failure, star=False)


def starmap(
    task: CanvasMember | AnyDefinition,
    items: Iterable[Mapping[str, Any]],
    *,
    on_failure: str = FAIL_FAST,
) -> Group:
    """A group running ``task`` once per item (a JSON object) merged over the signature's own
    payload object: partial application of keyword-argument payloads."""
    return _mapped(task, items, on_failure, star=True)


def _mapped(
    task: CanvasMember | AnyDefinition, items: Iterable[Any], on_failure: str, *, star: bool
) -> Group:
    # Anything but a Signature goes to signature(), which refuses what is not a handler.
    template = task if isinstance(task, Signature) else signature(cast("AnyDefinition", task))
    listed = tuple(items)
    if not listed:
        raise arguments.invalid("items", "needs at least one item")
    group = Group((), _on_failure(on_failure), template, listed, star)  # refuses too many items
    base = {} if template.receives_input else template.payload
    if star and not isinstance(base, dict):
        raise arguments.invalid("payload", f"starmap's signature payload must be a JSON object, got {base!r}")
    for i, item in enumerate(listed):
        if star and not isinstance(item, Mapping):
            raise arguments.invalid(f"items[{i}]", f"must be a JSON object for starmap, got {item!r}")
        _check_member(f"items[{i}]", template, {**base, **item} if star else item)
    return group


def _check_member(where: str, template: Signature, payload: Any) -> None:
    """The member ``template`` with ``payload`` checked as its enqueue would check it; an error
    names the member (``items[3]: payload: ...``)."""
    from runnerq_django import client
    from runnerq_django.storage.errors import InvalidArgument

    try:
        client.build_activity(template.activity_type, payload, **template.options)
    except InvalidArgument as exc:
        raise InvalidArgument(f"{where}: {exc.message}", field=f"{where}.{exc.field}") from None


# ActivityDefinition.s() and .si() build members with this (the registry imports no canvas).
install_signature(signature)

"""What a type checker sees of keyword-argument handlers and of canvas members (``a.s() | b.s()``):
checked by mypy in test_typing.py, never run. ``# E:`` ends a line mypy must report an error on, ``# N:`` the type ``reveal_type`` shows."""

# fmt: off
# (one case a line: the expectations are matched by line number)

from __future__ import annotations

from typing import Any, reveal_type

from runnerq_django.activities.registry import activity
from runnerq_django.canvas import chain, group
from runnerq_django.client import enqueue
from runnerq_django.worker.context import Context


@activity(name="typing.send_email")
def send_email(ctx: Context, to: str, subject: str, cc: list[str] | None = None) -> dict[str, str]:
    return {"to": to}


@activity
async def scale(ctx: Context, *, n: int, factor: float = 2.0) -> float:
    return n * factor


@activity(name="typing.single")
def single(ctx: Context, payload: dict[str, Any]) -> int:
    return len(payload)


@activity
def no_context(payload: list[int]) -> bool:
    return bool(payload)


def cases() -> None:
    handle = send_email.enqueue(to="a@example.com", subject="Hi")
    reveal_type(handle)  # N: runnerq_django.activities.nouns.ActivityHandle[dict[str, str]]
    reveal_type(handle.result())  # N: dict[str, str]
    reveal_type(send_email.using(queue="mail").enqueue("a", "b").result())  # N: dict[str, str]
    send_email.enqueue(to=1, subject="Hi")  # E: No overload variant of "enqueue" of "ActivityDefinition" matches argument types "int", "str"
    send_email.using(delay=60).enqueue(to=1, subject="Hi")  # E: Argument "to" to "enqueue" of "ConfiguredActivity" has incompatible type "int"; expected "str"
    send_email.using(delay=60).enqueue(to="a")  # E: Missing positional argument "subject" in call to "enqueue" of "ConfiguredActivity"
    send_email.using(delay=60).enqueue(to="a", subject="b", bcc="c")  # E: Unexpected keyword argument "bcc" for "enqueue" of "ConfiguredActivity"
    send_email.using(dely=60)  # E: Unexpected keyword argument "dely" for "using" of "ActivityDefinition"
    reveal_type(scale.using(priority=3))  # N: runnerq_django.activities.registry.ConfiguredActivity[[*, n: int, factor: float =], typing.Coroutine[Any, Any, float]]
    reveal_type(scale.enqueue(n=3).result())  # N: float
    scale.using(priority=3).enqueue(n="3")  # E: Argument "n" to "enqueue" of "ConfiguredActivity" has incompatible type "str"; expected "int"
    reveal_type(single.enqueue({"a": 1}, queue="q", delay=5).result())  # N: int
    single.enqueue({"a": 1}, priority="high")  # E: No overload variant of "enqueue" of "ActivityDefinition" matches argument types "dict[str, int]", "str"
    single.enqueue([1])  # the (payload, **options) form takes any payload: not checked
    single.using().enqueue([1])  # E: Argument 1 to "enqueue" of "ConfiguredActivity" has incompatible type "list[int]"; expected "dict[str, Any]"
    no_context.using().enqueue(["1"])  # E: List item 0 has incompatible type "str"; expected "int"
    reveal_type(no_context.enqueue([1]).result())  # N: bool
    reveal_type(no_context.using(delay=1).enqueue([1]))  # N: runnerq_django.activities.nouns.ActivityHandle[bool]
    reveal_type(enqueue(single, {}).result())  # N: int
    reveal_type(enqueue("other.language", {}).result())  # N: Any
    reveal_type(single.s({}) | no_context.s())  # N: runnerq_django.activities.nouns.CanvasPart
    reveal_type((single.s({}) | no_context.s() | scale.s()).enqueue(queue="q"))  # N: runnerq_django.activities.nouns.ActivityHandle[Any]
    reveal_type(single.s({}) | no_context)  # N: runnerq_django.activities.nouns.CanvasPart
    reveal_type(chain(single.s({}), no_context) | no_context.s())  # N: runnerq_django.canvas.builder.Chain
    reveal_type(group([single.s({}) | no_context.s(), scale.si({"n": 1})]))  # N: runnerq_django.canvas.builder.Group
    single.s({}) | 3  # E: Unsupported operand types for | ("CanvasMember" and "int")
    (single.s({}) | no_context.s()).enqueue(queue=1)  # E: Argument "queue" to "enqueue" of "CanvasPart" has incompatible type "int"; expected "str | None"


async def async_cases() -> None:
    reveal_type(await scale.enqueue(n=3).aresult())  # N: float
    reveal_type(await (await single.aenqueue({}, queue="q")).aresult())  # N: int
    await scale.aenqueue(n="3")  # E: No overload variant of "aenqueue" of "ActivityDefinition" matches argument type "str"

"""What a handler's signature says about its payload: one value, or keyword arguments.

The rule (docs/how-to/activities.md, "Keyword arguments"):

- ``(payload)`` and ``(ctx, payload)`` -- one or two positional parameters and no keyword-only
  parameter or ``**kwargs`` -- are *single-payload* handlers: the payload is passed as it is.
- Any other handler is a *keyword* handler: its first positional parameter receives ``ctx`` and
  the rest are filled by name from the payload, which is a JSON object
  (``def send_email(ctx, to: str, subject: str)`` gets ``{"to": ..., "subject": ...}``). One
  keyword argument is spelled ``(ctx, *, to)``, since ``(ctx, to)`` is ``(ctx, payload)``.

Enqueue checks a keyword payload against the signature (missing, unknown and, where the handler
is annotated with JSON types, wrongly-typed arguments) so that a mistake fails in the caller, not
attempts later in a worker. The worker checks only the names: another SDK may have written the
row, and a type mismatch is then the handler's to judge.

Internal: not part of the public API.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Union

from runnerq_django.activities.enqueue_options import OPTION_NAMES
from runnerq_django.exceptions import NonRetryableError
from runnerq_django.storage.validation import invalid

__all__ = ["HandlerSignature"]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class HandlerSignature:
    """The parameters of one handler, read once at ``@activity`` time."""

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func
        self.label = getattr(func, "__qualname__", repr(func))
        self.keywords = False
        self.takes_context = False
        self.names: tuple[str, ...] = ()  # the parameters a payload member fills, in order
        self.positional: tuple[str, ...] = ()  # of those, the ones enqueue may take positionally
        self.required: tuple[str, ...] = ()
        self.any_name = False  # a **kwargs parameter takes every other member
        self.context_name = ""
        self._hints: dict[str, Any] | None = None
        try:
            params = list(inspect.signature(func).parameters.values())
        except (TypeError, ValueError):  # a builtin or C callable: called with the payload, as ever
            return
        positional = [p for p in params if p.kind in _POSITIONAL]
        keyword_only = [p for p in params if p.kind is p.KEYWORD_ONLY]
        var_keyword = any(p.kind is p.VAR_KEYWORD for p in params)
        if not keyword_only and not var_keyword and len(positional) in (1, 2):
            self.takes_context = len(positional) == 2
            return
        self._read_keywords(params, positional, var_keyword)

    def _read_keywords(
        self, params: list[inspect.Parameter], positional: list[inspect.Parameter], var_keyword: bool
    ) -> None:
        shape = "must take (payload), (ctx, payload) or (ctx, <keyword arguments>)"
        if not positional:
            raise TypeError(f"activity handler {self.label!r} {shape}: its first parameter receives ctx")
        after_ctx = params[1:]
        for param in after_ctx:
            if param.kind is param.VAR_POSITIONAL:
                raise TypeError(
                    f"activity handler {self.label!r} {shape}: *{param.name} can't be filled from a JSON object"
                )
            if param.kind is param.POSITIONAL_ONLY:
                raise TypeError(
                    f"activity handler {self.label!r} {shape}: {param.name!r} is positional-only, "
                    "so no payload member can fill it by name"
                )
        named = [p for p in after_ctx if p.kind is not p.VAR_KEYWORD]
        self.context_name = positional[0].name
        self.keywords = self.takes_context = True
        self.names = tuple(p.name for p in named)
        self.positional = tuple(p.name for p in named if p.kind is p.POSITIONAL_OR_KEYWORD)
        self.required = tuple(p.name for p in named if p.default is p.empty)
        self.any_name = var_keyword

    def describe(self) -> str:
        return f"{self.label}(ctx, {', '.join(self.names)})" if self.names else f"{self.label}(ctx)"

    # enqueue ----------------------------------------------------------------------------------------

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """``enqueue(*args, **kwargs)`` as the JSON object payload (which enqueue then checks
        with :meth:`check`)."""
        if len(args) > len(self.positional):
            raise invalid(
                "payload",
                f"{self.describe()} takes {len(self.positional)} positional argument(s) after ctx, "
                f"got {len(args)}",
            )
        payload = dict(zip(self.positional, args))
        for name, value in kwargs.items():
            if name in payload:
                raise invalid(_member("payload", name), "given both positionally and by keyword")
            payload[name] = value
        return payload

    def check(self, payload: Any, field: str = "payload") -> dict[str, Any]:
        """Refuse a payload that is not an object of this handler's arguments: unknown or missing
        names, or a value its annotation (when a JSON type) does not admit."""
        if payload is None:
            payload = {}  # an enqueue without arguments
        if not isinstance(payload, dict) or not all(isinstance(key, str) for key in payload):
            raise invalid(
                field,
                f"{self.describe()} takes keyword arguments: the payload must be a JSON object of "
                f"them, got {type(payload).__name__}",
            )
        problem = self.names_problem(payload)
        if problem is not None:
            raise invalid(*problem)
        hints = self.hints()
        for name, value in payload.items():
            hint = hints.get(name)
            if hint is not None and json_type(hint) and not admits(hint, value):
                raise invalid(
                    _member(field, name),
                    f"must be {type_name(hint)} (the annotation of {self.label}'s {name!r}), "
                    f"got {type(value).__name__}",
                )
        return payload

    def names_problem(self, payload: Mapping[str, Any], field: str = "payload") -> tuple[str, str] | None:
        """``(field, message)`` for the first unknown or missing argument, or ``None``."""
        if self.context_name in payload:  # **kwargs would take it, and the call would fail
            return _member(field, self.context_name), (
                f"{self.describe()} takes no argument {self.context_name!r}: it is the context"
            )
        if not self.any_name:
            unknown = [name for name in payload if name not in self.names]
            if unknown:
                hint = ""
                options = [name for name in unknown if name in OPTION_NAMES]
                if options:
                    hint = (
                        f"; enqueue options of a keyword handler go in .using({options[0]}=...).enqueue(...)"
                    )
                return _member(field, unknown[0]), (
                    f"{self.describe()} takes no argument {', '.join(map(repr, unknown))}{hint}"
                )
        missing = [name for name in self.required if name not in payload]
        if missing:
            return _member(field, missing[0]), (
                f"{self.describe()} is missing the argument(s) {', '.join(map(repr, missing))}"
            )
        return None

    def hints(self) -> dict[str, Any]:
        """The annotations, resolved on first use (a forward reference may name a class defined
        after the handler). One that can't be resolved disables the type checks, not enqueue."""
        if self._hints is None:
            try:
                self._hints = typing.get_type_hints(self.func)
            except Exception:
                self._hints = {}
        return self._hints

    # the worker ---------------------------------------------------------------------------------------

    def call(self, ctx: Any, payload: Any) -> Any:
        """Call the handler with an attempt's context and stored payload (a coroutine for an
        ``async def`` handler)."""
        if not self.keywords:
            return self.func(ctx, payload) if self.takes_context else self.func(payload)
        if payload is None:
            payload = {}
        if not isinstance(payload, dict):
            raise NonRetryableError(
                f"{self.describe()} takes keyword arguments, but the payload is a {type(payload).__name__}"
            )
        problem = self.names_problem(payload)
        if problem is not None:
            raise NonRetryableError(f"{problem[0]}: {problem[1]}")
        return self.func(ctx, **payload)


def _member(field: str, name: str) -> str:
    return f"{field}[{name!r}]"


# JSON types of annotations ------------------------------------------------------------------------

_SCALARS: dict[Any, Callable[[Any], bool]] = {
    str: lambda v: isinstance(v, str),
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),  # PEP 484: int is a float
    type(None): lambda v: v is None,
    None: lambda v: v is None,
    Any: lambda v: True,
    object: lambda v: True,
}
_UNIONS = (Union, types.UnionType)


def json_type(hint: Any) -> bool:
    """Whether ``hint`` is made of JSON types only (str, int, float, bool, None, Any, list,
    dict with str keys, unions and Literals of them), the annotations enqueue checks."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is None:
        try:
            return hint in _SCALARS or hint in (list, dict)
        except TypeError:  # an unhashable annotation object: not a JSON type
            return False
    if origin in _UNIONS:
        return all(json_type(arg) for arg in args)
    if origin is Literal:
        return all(isinstance(arg, (str, int, bool)) or arg is None for arg in args)
    if origin is list:
        return all(json_type(arg) for arg in args)
    if origin is dict:
        return len(args) == 2 and args[0] is str and json_type(args[1])
    return False


def admits(hint: Any, value: Any) -> bool:
    """Whether ``value`` is of the JSON type ``hint`` (see :func:`json_type`)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is None:
        if hint is list:
            return isinstance(value, (list, tuple))
        if hint is dict:
            return isinstance(value, dict)
        return _SCALARS[hint](value)
    if origin in _UNIONS:
        return any(admits(arg, value) for arg in args)
    if origin is Literal:
        return any(type(value) is type(arg) and value == arg for arg in args)
    if origin is list:
        return isinstance(value, (list, tuple)) and (not args or all(admits(args[0], v) for v in value))
    return isinstance(value, dict) and all(
        isinstance(k, str) and admits(args[1], v) for k, v in value.items()
    )


def type_name(hint: Any) -> str:
    if hint is type(None) or hint is None:
        return "None"
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    return repr(hint).replace("typing.", "")

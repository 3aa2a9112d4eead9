"""SuperJSON's typed values (the TypeScript SDK's ``superjson-v1``) decoded to Python.

An envelope is ``{"json": <JSON-safe value>, "meta": {"values": <tree>}}``. The tree annotates the
values JSON can't carry: at the top either an annotation of the whole value (``["set"]``, or
``["map", {<inner tree>}]`` when its entries hold annotated values too) or an object from escaped
dotted paths (``"a.b"``, with ``\\.`` for a dot inside a key) to such annotations. Inner paths of a
Map or a Set index the JSON form (a list of ``[key, value]`` pairs, a list of members), so they are
applied before the value itself is rebuilt: children first, as SuperJSON does.

Only the types with a plain Python counterpart are decoded (and ``number`` when it is ``-0``);
any other annotation (``regexp``, ``Error``, ``number`` for NaN, ``class`` ...) raises
:class:`UnsupportedValue` naming the type and the path, so the activity fails once, clearly,
instead of running on a guessed value.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from runnerq_django.exceptions import UnsupportedValue

MAX_SHOWN_CHARS = 200  # of a value an error message quotes


def decode(envelope: Any) -> Any:
    """The typed value of a ``superjson-v1`` envelope. The envelope is left as it is: only the
    lists and objects on an annotated path are copied (parts without annotations are shared, as
    ``plain_json`` shares the whole ``json`` member). Data that is not an envelope passes
    through, as in ``plain_json``.

    Annotations nested deeper than Python's recursion limit raise :class:`UnsupportedValue`
    (``nested too deep for Python``), as ``storage.decode`` says of JSON nested that deep."""
    if not isinstance(envelope, dict) or "json" not in envelope:
        return envelope
    tree = _annotations(envelope)
    if tree is None:
        return envelope["json"]
    try:
        return _apply(envelope["json"], tree, "$", _rebuild)
    except RecursionError:
        raise UnsupportedValue("nested too deep for Python") from None


def _annotations(envelope: dict[str, Any]) -> Any:
    """An envelope's ``meta.values`` tree, or None when nothing is annotated."""
    meta = envelope.get("meta")
    return meta.get("values") if isinstance(meta, dict) else None


def plain(envelope: Any) -> Any:
    """The plain JSON view (``serialization.plain_json``: the envelope's ``json`` member) with
    one annotation applied: SuperJSON writes the number ``-0`` as the string ``"-0"`` annotated
    ``number``, and a handler reading a number must get one. Annotations that don't fit the
    value leave the view as it is: plain mode reads what the Go SDK and the admin show."""
    if not isinstance(envelope, dict) or "json" not in envelope:
        return envelope
    tree = _annotations(envelope)
    if tree is None:
        return envelope["json"]
    try:
        return _apply(envelope["json"], tree, "$", _negative_zero)
    except (UnsupportedValue, RecursionError):
        return envelope["json"]


Rebuild = Callable[[Any, Any, str], Any]  # (the JSON form, the annotation's type, its path)


def _apply(value: Any, tree: Any, path: str, rebuild: Rebuild) -> Any:
    if isinstance(tree, dict):
        return _apply_inner(value, tree, path, rebuild)
    if isinstance(tree, list) and len(tree) in (1, 2):
        if len(tree) == 2:
            value = _apply_inner(value, tree[1], path, rebuild)
        return rebuild(value, tree[0], path)
    raise UnsupportedValue(f"{path}: malformed SuperJSON annotation {tree!r}")


def _apply_inner(value: Any, inner: Any, path: str, rebuild: Rebuild) -> Any:
    if not isinstance(inner, dict):
        raise UnsupportedValue(f"{path}: malformed SuperJSON annotations {inner!r}")
    for dotted, tree in inner.items():
        # The lambda runs inside _replace_at, in this iteration: it sees this iteration's tree.
        value = _replace_at(
            value,
            split_path(dotted),
            lambda child, p: _apply(child, tree, p, rebuild),  # noqa: B023
            path,
        )
    return value


def _replace_at(value: Any, segments: list[str], change: Callable[[Any, str], Any], path: str) -> Any:
    """``value`` with the item at ``segments`` replaced by ``change(item, its path)``."""
    if not segments:
        return change(value, path)
    head, rest = segments[0], segments[1:]
    # ASCII digits only: "²" is a digit to str.isdigit but no int, and the ValueError escaped.
    if isinstance(value, list) and head.isascii() and head.isdigit() and int(head) < len(value):
        index: Any = int(head)
    elif isinstance(value, dict) and head in value:
        index = head
    else:
        raise UnsupportedValue(f"{path}: SuperJSON annotates {head!r}, which the value does not have")
    value = value.copy()  # the envelope's own list or object stays as it was
    value[index] = _replace_at(value[index], rest, change, f"{path}.{head}")
    return value


def split_path(dotted: str) -> list[str]:
    """SuperJSON's escaped path: segments split at ``.``; ``\\.`` and ``\\\\`` are a literal dot
    and backslash."""
    segments, segment, i = [], "", 0
    while i < len(dotted):
        pair = dotted[i : i + 2]
        if pair in ("\\\\", "\\."):
            segment += pair[1]
            i += 2
            continue
        if dotted[i] == ".":
            segments.append(segment)
            segment = ""
        else:
            segment += dotted[i]
        i += 1
    segments.append(segment)
    return segments


def _rebuild(value: Any, kind: Any, path: str) -> Any:
    decoder = _DECODERS.get(kind) if isinstance(kind, str) else None
    if decoder is None:
        name = "/".join(map(str, kind)) if isinstance(kind, list) else str(kind)
        raise UnsupportedValue(
            f"{path}: SuperJSON type {name!r} has no Python counterpart "
            f"(decoded: Date, bigint, Set, Map, undefined, -0)"
        )
    try:
        return decoder(value)
    except (TypeError, ValueError) as exc:
        shown = repr(value) if len(repr(value)) <= MAX_SHOWN_CHARS else repr(value)[:MAX_SHOWN_CHARS] + "..."
        raise UnsupportedValue(f"{path}: SuperJSON {kind} {shown} can't be decoded ({exc})") from None


def _negative_zero(value: Any, kind: Any, path: str) -> Any:
    return -0.0 if kind == "number" and value == "-0" else value


def _number(value: Any) -> float:
    # SuperJSON annotates the numbers JSON can't carry: -0, NaN, Infinity, -Infinity. Only -0
    # has a JSON counterpart Python can store again.
    if value != "-0":
        raise ValueError("NaN and the infinities are not JSON")
    return -0.0


def _date(value: Any) -> datetime:
    if not isinstance(value, str):
        raise TypeError("not a string")
    return datetime.fromisoformat(value)  # JavaScript's toISOString(): always UTC, with a Z


def _bigint(value: Any) -> int:
    if not isinstance(value, str):
        raise TypeError("not a string")
    return int(value)


def _set(value: Any) -> set[Any]:
    if not isinstance(value, list):
        raise TypeError("not a list")
    return set(value)  # TypeError for a member Python can't hash (a list or a dict)


def _map(value: Any) -> dict[Any, Any]:
    if not isinstance(value, list) or not all(isinstance(p, list) and len(p) == 2 for p in value):
        raise TypeError("not a list of [key, value] pairs")
    return dict(value)  # TypeError for a key Python can't hash (a list or a dict)


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "Date": _date,
    "bigint": _bigint,
    "set": _set,
    "map": _map,
    "undefined": lambda _: None,
    "number": _number,
}

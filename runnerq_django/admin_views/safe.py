"""Rows as the admin can always show them, whatever another SDK stored.

Postgres accepts values Python cannot decode (a json-v1 number like ``1e5000``, jsonb nested
2,000 deep, a timestamp of ``-infinity``) and values too big to render (a 4 MiB error or
result). So the admin never lets Django decode those columns: timestamps come as ``NULL`` when
infinite (with their text beside them), JSON comes pretty-printed by Postgres and cut to a bound
in SQL, long text is cut in SQL. Only a cut, bounded text ever reaches Python or a template.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Self, TypeVar

from django.db import models
from django.db.models.expressions import RawSQL
from django.db.models.query import ModelIterable

from runnerq_django.storage import reads as q

MAX_JSON_CHARS = 64 * 1024  # an input, a result or metadata on the detail page
ROW_JSON_CHARS = 2 * 1024  # one event, step or signal among up to 500 on the detail page
MAX_TEXT_CHARS = 64 * 1024  # last_error on the detail page
LIST_TEXT_CHARS = 300  # a value in a list's title attribute (the cell itself shows fewer)
# An id, type, worker token or step name: every one the API accepts fits (512 bytes at most);
# a longer one another SDK stored is cut, and ends in CUT_MARK. A 100 KB worker id once made
# an 878 KiB detail page.
ID_CHARS = q.ID_CHARS
CUT_MARK = "…"
ACTIVITY_TIMES = ("created_at", "scheduled_at", "started_at", "completed_at", "last_error_at")

_M = TypeVar("_M", bound=models.Model)


class Shown(str):
    """A stored value as shown (the string): at most its bound of text, with a ``note`` when that
    is not all of it or when Python could not decode it."""

    note: str

    def __new__(cls, text: str, note: str = "") -> Shown:
        value = super().__new__(cls, text)
        value.note = note
        return value


def shown(text: str | None, length: int | None, limit: int, *, is_json: bool = True) -> Shown | None:
    if text is None:
        return None
    if length is not None and length > limit:
        return Shown(text[:limit], f"cut: the first {limit:,} of {length:,} characters are shown")
    if is_json:
        try:
            json.loads(text)
        except (ValueError, RecursionError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(";")[0][:120]
            return Shown(text, f"shown as stored: Python cannot decode this value ({reason})")
    return Shown(text)


def decoded(text: str | None, length: int | None, limit: int) -> Any:  # a JSON value
    """The decoded value of a JSON text fetched whole (``length <= limit``), else ``None``."""
    if text is None or (length is not None and length > limit):
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


# -- querysets -----------------------------------------------------------------------------------

# ModelIterable is generic for type checkers only: Django 6.1's class is not subscriptable.
if TYPE_CHECKING:
    _ModelRows = ModelIterable[models.Model]
else:
    _ModelRows = ModelIterable


class _SafeRows(_ModelRows):
    """Model instances whose risky columns were read through ``safe_rows``' annotations: each
    timestamp is the finite value or ``None`` (``obj.rq_infinite`` maps the field to its text),
    each cut text is the cut (``obj.rq_lengths`` has the full length), each pretty-printed JSON
    column a ``Shown`` in ``obj.rq_pretty``."""

    def __iter__(self) -> Iterator[models.Model]:
        assert isinstance(self.queryset, SafeQuerySet)  # safe_rows sets this iterable on its own querysets
        spec = self.queryset._rq_safe
        assert spec is not None
        for obj in super().__iter__():
            values = obj.__dict__
            infinite: dict[str, str] = {}
            lengths: dict[str, int | None] = {}
            values["rq_infinite"], values["rq_lengths"] = infinite, lengths
            for name in spec["times"]:
                values[name] = values.pop(f"rq_{name}")
                raw = values.pop(f"rq_{name}_raw")
                if raw is not None:
                    infinite[name] = raw
            for name in spec["texts"]:
                values[name] = values.pop(f"rq_{name}")
                lengths[name] = values.pop(f"rq_{name}_length")
            for name in spec["ids"]:
                values[name] = values.pop(f"rq_{name}")
                length = values.pop(f"rq_{name}_length")
                if length is not None and length > ID_CHARS:
                    values[name] += CUT_MARK
            values["rq_pretty"] = {
                name: shown(values.pop(f"rq_pretty_{name}"), values.pop(f"rq_pretty_{name}_length"), limit)
                for name, limit in spec["pretty"].items()
            }
            yield obj


class SafeQuerySet(models.QuerySet[_M]):
    """Keeps the safe reading through the clones the admin's changelist makes."""

    _rq_safe: dict[str, Any] | None

    def _clone(self) -> Self:
        clone: Self = super()._clone()  # type: ignore[misc]  # QuerySet._clone is private: not in the stubs
        clone._rq_safe = getattr(self, "_rq_safe", None)
        return clone


def pretty_of(obj: models.Model) -> dict[str, Shown | None]:
    """The pretty-printed JSON columns ``safe_rows`` read of ``obj``, by name."""
    pretty: dict[str, Shown | None] = vars(obj)["rq_pretty"]
    return pretty


def lengths_of(obj: models.Model) -> dict[str, int | None]:
    """The full lengths of the text columns ``safe_rows`` cut for ``obj``, by name."""
    lengths: dict[str, int | None] = vars(obj)["rq_lengths"]
    return lengths


def infinite_of(obj: models.Model) -> dict[str, str]:
    """The stored text of ``obj``'s infinite timestamps (``safe_rows`` read them as ``None``)."""
    infinite: dict[str, str] = vars(obj)["rq_infinite"]
    return infinite


def safe_rows(
    queryset: models.QuerySet[_M],
    *,
    times: tuple[str, ...] = (),
    texts: dict[str, int] | None = None,
    pretty: dict[str, int] | None = None,
    skip: tuple[str, ...] = (),
    ids: tuple[str, ...] = (),
) -> SafeQuerySet[_M]:
    """``queryset`` reading ``times`` finite-or-None, ``texts`` (text or jsonb columns) as their
    text cut to a bound, ``pretty`` jsonb columns pretty-printed and cut by Postgres (as plain
    JSON when the table has a ``serialization`` column), ``ids`` (text columns) cut to
    ``ID_CHARS`` and marked when cut, and not reading ``skip`` at all."""
    texts, pretty = texts or {}, pretty or {}
    opts = queryset.model._meta
    table = opts.db_table
    annotations: dict[str, RawSQL] = {}
    for name, limit in pretty.items():
        column = f'"{table}"."{name}"'
        if any(f.name == "serialization" for f in opts.fields):
            column = q.plain_json(column, f'"{table}"."serialization"')
        text, length = q.pretty_json(column, limit)
        annotations[f"rq_pretty_{name}"] = RawSQL(text, (), output_field=models.TextField())
        annotations[f"rq_pretty_{name}_length"] = RawSQL(length, (), output_field=models.IntegerField())
    for name in times:
        value, raw = q.finite_time(f'"{table}"."{name}"')
        annotations[f"rq_{name}"] = RawSQL(value, (), output_field=models.DateTimeField())
        annotations[f"rq_{name}_raw"] = RawSQL(raw, (), output_field=models.TextField())
    for name, limit in [*texts.items(), *((name, ID_CHARS) for name in ids)]:
        column = f'"{table}"."{name}"'
        if isinstance(queryset.model._meta.get_field(name), models.JSONField):
            column += "::text"
        text, length = q.cut_text(column, limit)
        annotations[f"rq_{name}"] = RawSQL(text, (), output_field=models.TextField())
        annotations[f"rq_{name}_length"] = RawSQL(length, (), output_field=models.IntegerField())
    safe: SafeQuerySet[_M] = (
        SafeQuerySet(queryset.model, query=queryset.query.chain(), using=queryset.db)
        .defer(*times, *texts, *pretty, *skip, *ids)
        .annotate(**annotations)
    )
    safe._rq_safe = {"times": times, "texts": tuple(texts), "pretty": pretty, "ids": ids}
    safe._iterable_class = _SafeRows
    return safe


# -- display -------------------------------------------------------------------------------------

# Characters that reorder or hide what surrounds them: bidirectional controls and zero-width ones.
_INVISIBLE = {
    chr(c)
    for c in (
        0x061C,
        0x200B,
        0x200C,
        0x200D,
        0x200E,
        0x200F,
        0x2060,
        0xFEFF,
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
    )
}


def visible(text: object) -> str:
    """``text`` with bidirectional, zero-width and other format/control characters spelled as
    ``<U+202E>``, so a stored id, type or queue cannot reorder or hide what an operator reads."""
    text = "" if text is None else str(text)
    if text.isprintable() and not _INVISIBLE.intersection(text):
        return text
    return "".join(
        f"<U+{ord(ch):04X}>" if ch in _INVISIBLE or unicodedata.category(ch) in ("Cc", "Cf") else ch
        for ch in text
    )

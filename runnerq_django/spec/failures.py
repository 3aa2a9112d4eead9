"""A failure's recorded details (the spec's free-form ``failure``), readable by every SDK.

The Python SDK's fields are ``{language, exception, traceback}``; the TypeScript SDK's
``{name, message, stack, code, cause}``. We write both sets, so that either SDK's error readers
show the exception's name, message and stack, and read either set back.

Internal: not part of the public API.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any

MAX_TRACEBACK_CHARS = 8000
# Causes recorded below a failure (``raise ... from``); a chain can't loop but may be long.
MAX_CAUSES = 8


def storable(text: str) -> str:
    """Error text as Postgres text can hold it: an exception message may carry a NUL or a lone
    surrogate, which would make the failure itself unrecordable."""
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def message_of(error: BaseException) -> str:
    try:
        return storable(str(error))
    except Exception:  # an exception whose __str__ raises still gets recorded
        return "<str() failed>"


def recorded(error: BaseException) -> dict[str, Any]:
    """The failure details of ``error``: both SDKs' fields; ``stack`` and ``traceback`` are the
    same text (Python's traceback, which shows the whole chain of causes)."""
    text = storable("".join(traceback.format_exception(error)))[-MAX_TRACEBACK_CHARS:]
    detail: dict[str, Any] = {
        "language": "python",
        "exception": f"{type(error).__module__}.{type(error).__qualname__}",
        "traceback": text,
        "name": type(error).__name__,
        "message": message_of(error),
        "stack": text,
    }
    cause = _cause(error.__cause__, MAX_CAUSES)
    if cause is not None:
        detail["cause"] = cause
    return detail


def _cause(error: BaseException | None, budget: int) -> dict[str, Any] | None:
    if error is None or budget == 0:
        return None
    cause: dict[str, Any] = {"name": type(error).__name__, "message": message_of(error)}
    inner = _cause(error.__cause__, budget - 1)
    if inner is not None:
        cause["cause"] = inner
    return cause


@dataclass(frozen=True)
class Failure:
    """What a failure's details say, whichever SDK recorded them (empty strings when unknown)."""

    name: str = ""
    message: str = ""
    stack: str = ""
    code: str = ""
    cause: Any = None


def read(data: Any) -> Failure:
    """The failure in an Err result's data (its ``failure`` member, or the data itself), in
    either SDK's fields."""
    detail = data.get("failure") if isinstance(data, dict) and isinstance(data.get("failure"), dict) else data
    if not isinstance(detail, dict):
        return Failure()

    def text(*keys: str) -> str:
        for key in keys:
            value = detail.get(key)
            if isinstance(value, str):
                return value
        return ""

    name = text("name") or text("exception").rpartition(".")[2]
    code = detail.get("code")
    return Failure(
        name=name,
        message=text("message"),
        stack=text("stack", "traceback"),
        code="" if code is None else str(code),
        cause=detail.get("cause"),
    )

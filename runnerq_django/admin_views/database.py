"""Which database an admin page shows and acts on, when queues live on several
(``RUNNERQ['QUEUE_DATABASES']``): the ``database`` query parameter (the lists' "By database"
filter, carried to the detail page in the list's preserved filters), else ``RUNNERQ['DATABASE']``.

``guard.run`` selects it for the length of a request, so every read of the page (``queries``,
``live``, the detail page's, the lists' querysets) and every operator action of it runs on that one
database, with the statement timeout set there.

Internal: not part of the public API.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from django.http import QueryDict

from runnerq_django import conf, routing

if TYPE_CHECKING:
    from django.http import HttpRequest

PARAMETER = "database"
PRESERVED = "_changelist_filters"  # where the admin carries a list's filters to its detail pages

_current: ContextVar[str | None] = ContextVar("runnerq_admin_database", default=None)


class UnknownDatabase(ValueError):
    """A ``database`` parameter naming no alias that hosts a queue."""


def choices() -> list[str]:
    """The aliases the console can show: every one that hosts a queue, RUNNERQ['DATABASE'] first."""
    return routing.databases()


def several() -> bool:
    return len(choices()) > 1


def requested(request: HttpRequest) -> str:
    """The alias a request asks for (``UnknownDatabase`` for one that hosts no queue)."""
    value = request.GET.get(PARAMETER)
    if value is None and PRESERVED in request.GET:
        value = QueryDict(request.GET[PRESERVED]).get(PARAMETER)
    if not value:
        return conf.database_alias()
    if value not in choices():
        raise UnknownDatabase(
            f"database: {value[:40]!r} hosts no queue here (RUNNERQ['QUEUE_DATABASES']); "
            f"the console shows {', '.join(choices())}"
        )
    return value


def named(request: HttpRequest) -> bool:
    """Whether the request says which database it is about."""
    return PARAMETER in request.GET or PARAMETER in QueryDict(request.GET.get(PRESERVED, ""))


def current() -> str:
    """The alias of the page being served (RUNNERQ['DATABASE'] outside a request)."""
    return _current.get() or conf.database_alias()


@contextmanager
def selected(alias: str) -> Iterator[str]:
    token = _current.set(alias)
    try:
        yield alias
    finally:
        _current.reset(token)

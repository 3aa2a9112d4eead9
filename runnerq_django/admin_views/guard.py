"""What stands between an admin request and the database: every read runs under
``RUNNERQ['ADMIN_STATEMENT_TIMEOUT']``, and a value the database cannot take, a lookup the admin
does not offer or a query that ran out of time answers with a page that says so (400 or 503)
instead of a 500.

It also decides which database a request reads (``read_alias``, the one seam): a read-only
request (GET or HEAD) reads ``RUNNERQ['READ_REPLICA']`` when one is set; everything else (an
action, its confirmation page and dry run, a pause) runs on ``RUNNERQ['DATABASE']``, the primary,
so what an action does is decided on the primary's current state, never on a stale copy.

With queues on several databases (``RUNNERQ['QUEUE_DATABASES']``), a request is about one of them
(``admin_views.database``: the lists' "By database" filter): its reads and actions run there, and
the read replica is only ever used for ``RUNNERQ['DATABASE']``, the primary it replicates."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

from django.contrib.admin.exceptions import DisallowedModelAdminLookup
from django.core.exceptions import SuspiciousOperation
from django.db import DatabaseError, OperationalError, connections, transaction
from django.template.response import TemplateResponse

from runnerq_django import conf
from runnerq_django.admin_views import database
from runnerq_django.storage import session, validation
from runnerq_django.storage.errors import InvalidArgument

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin
    from django.db.models import Model, QuerySet
    from django.http import HttpRequest, HttpResponse, QueryDict

    _M = TypeVar("_M", bound=Model)

QUERY_CANCELED = "57014"
# A hot standby cancels a query whose rows replay must remove (a conflict with recovery).
RECOVERY_CONFLICT = "40001"

# Set by ``run`` for the length of a read-only request: the alias that request reads.
_reading: ContextVar[str | None] = ContextVar("runnerq_admin_read_alias", default=None)


def read_alias() -> str:
    """The database the admin reads now: the read replica inside a read-only request (``run`` of
    a GET or HEAD, when ``RUNNERQ['READ_REPLICA']`` is set) about ``RUNNERQ['DATABASE']``, the
    page's database (the primary, or another one that hosts queues) everywhere else."""
    return _reading.get() or database.current()


def _read_alias_of(page: str) -> str:
    """What a read-only request about database ``page`` reads: the read replica for
    RUNNERQ['DATABASE'] (when one is set), which it replicates; ``page`` itself otherwise."""
    return conf.console_read_alias() if page == conf.database_alias() else page


@contextmanager
def page_on(alias: str) -> Iterator[str]:
    """Serve the rest of the page from database ``alias`` (its reads from ``_read_alias_of``)."""
    with database.selected(alias):
        token = _reading.set(_read_alias_of(alias) if _reading.get() is not None else None)
        try:
            yield alias
        finally:
            _reading.reset(token)


def rows(model: type[_M]) -> QuerySet[_M]:
    """``model``'s rows on ``read_alias()``: how the admin's pages start an ORM read."""
    return model._default_manager.using(read_alias())


class BadFilterValue(SuspiciousOperation):
    """A filter value the database cannot take (the admin's ChangeList re-raises this kind)."""


class BadFormValue(SuspiciousOperation):
    """A posted value no form of the console would send (a forged cursor, a selection that is
    not an activity id): the action answers 400 naming the field, and nothing is done."""


def filter_value(parameter: str, value: str) -> str:
    """``value`` of filter ``parameter`` if Postgres can compare a column with it."""
    try:
        return validation.text(parameter, value, validation.MAX_TYPE_BYTES)
    except InvalidArgument as exc:
        raise BadFilterValue(exc.message) from None


def _sqlstate(exc: BaseException) -> str | None:
    found: str | None = getattr(exc.__cause__, "sqlstate", None) or getattr(exc, "sqlstate", None)
    return found


def _replica_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` is the read replica's connection failing (not a query's error)."""
    replica = conf.console_read_alias()
    if replica == conf.database_alias() or not isinstance(exc, OperationalError):
        return False
    raw = connections[replica].connection
    return raw is None or bool(raw.closed)


def _timed_out(exc: BaseException) -> bool:
    return _sqlstate(exc) == QUERY_CANCELED


def run(model_admin: ModelAdmin[Any], request: HttpRequest, view: Callable[[], HttpResponse]) -> HttpResponse:
    """``view()`` (a response), read-only requests under the statement timeout, failures as pages,
    all of it on the database the request asks for (``admin_views.database``)."""
    try:
        alias = database.requested(request)
    except database.UnknownDatabase as exc:
        return _page(model_admin, request, 400, "Bad filter value", str(exc))
    with database.selected(alias):
        return _run(model_admin, request, view)


def _run(
    model_admin: ModelAdmin[Any], request: HttpRequest, view: Callable[[], HttpResponse]
) -> HttpResponse:
    try:
        _refuse_nul(request.GET, BadFilterValue)
        if request.method not in ("GET", "HEAD"):
            _refuse_nul(request.POST, BadFormValue)
            return view()  # operator actions keep their own transactions, on the primary
        # The replica replicates RUNNERQ['DATABASE']: another database's page reads that database.
        token = _reading.set(_read_alias_of(database.current()))
        try:
            return _with_timeout(view)
        finally:
            _reading.reset(token)
    except DisallowedModelAdminLookup as exc:
        return _page(
            model_admin,
            request,
            400,
            "This list does not offer that filter",
            f"{exc}. Use the filters in the sidebar or the search box.",
        )
    except BadFilterValue as exc:
        return _page(model_admin, request, 400, "Bad filter value", str(exc))
    except BadFormValue as exc:
        return _page(model_admin, request, 400, "Bad form value", f"Nothing was done: {exc}")
    except DatabaseError as exc:
        if _replica_unreachable(exc):
            return _page(
                model_admin,
                request,
                503,
                "The read replica can't be reached",
                f"This page reads the replica {conf.console_read_alias()!r} (RUNNERQ['READ_REPLICA']), which "
                f"did not answer: {str(exc).strip()}. Actions still work: they run on the primary. "
                "Set RUNNERQ['READ_REPLICA'] to None to read the primary meanwhile.",
            )
        if _sqlstate(exc) == RECOVERY_CONFLICT and conf.console_read_alias() != conf.database_alias():
            return _page(
                model_admin,
                request,
                503,
                "The read replica cancelled the query",
                f"The replica {conf.console_read_alias()!r} (RUNNERQ['READ_REPLICA']) cancelled a query of "
                f"this page to replay changes from the primary ({str(exc).strip()}). Reload the page.",
            )
        if not _timed_out(exc):
            raise
        seconds = conf.get("ADMIN_STATEMENT_TIMEOUT")
        return _page(
            model_admin,
            request,
            503,
            "The query took too long",
            f"A query of this page ran longer than RUNNERQ['ADMIN_STATEMENT_TIMEOUT'] ({seconds} s) and was "
            "cancelled. Narrow the filters (a queue, a status) and try again.",
        )


def _refuse_nul(values: QueryDict, error: type[SuspiciousOperation]) -> None:
    """Postgres text cannot store NUL: a parameter holding one is refused before any query."""
    for name, listed in values.lists():
        if "\x00" in name or any("\x00" in value for value in listed):
            raise error(f"{name}: must not contain NUL characters (Postgres text cannot store them)")


def _with_timeout(view: Callable[[], HttpResponse]) -> HttpResponse:
    alias = read_alias()
    milliseconds = max(1, int(float(conf.get("ADMIN_STATEMENT_TIMEOUT")) * 1000))
    with transaction.atomic(using=alias):
        before = session.set_statement_timeout(alias, f"{milliseconds}ms")
        response = view()
        if hasattr(response, "render"):
            response.render()  # the changelist's queries partly run while its template renders
        # Inside an outer transaction (a test, ATOMIC_REQUESTS) the setting would outlive us.
        session.restore_statement_timeout(alias, before)
    return response


def _page(
    model_admin: ModelAdmin[Any], request: HttpRequest, status: int, title: str, message: str
) -> TemplateResponse:
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "message": message,
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/runnerq_django/problem.html", context, status=status)

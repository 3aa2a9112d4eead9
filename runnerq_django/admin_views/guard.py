"""What stands between an admin request and the database: every read runs under
``RUNNERQ['ADMIN_STATEMENT_TIMEOUT']``, and a value the database cannot take, a lookup the admin
does not offer or a query that ran out of time answers with a page that says so (400 or 503)
instead of a 500."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.contrib.admin.exceptions import DisallowedModelAdminLookup
from django.core.exceptions import SuspiciousOperation
from django.db import DatabaseError, transaction
from django.template.response import TemplateResponse

from runnerq_django import conf
from runnerq_django.admin_views import database
from runnerq_django.storage import session, validation
from runnerq_django.storage.errors import InvalidArgument

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin
    from django.http import HttpRequest, HttpResponse

QUERY_CANCELED = "57014"


class BadFilterValue(SuspiciousOperation):
    """A filter value the database cannot take (the admin's ChangeList re-raises this kind)."""


def filter_value(parameter: str, value: str) -> str:
    """``value`` of filter ``parameter`` if Postgres can compare a column with it."""
    try:
        return validation.text(parameter, value, validation.MAX_TYPE_BYTES)
    except InvalidArgument as exc:
        raise BadFilterValue(exc.message) from None


def _timed_out(exc: BaseException) -> bool:
    cause = exc.__cause__
    return (
        getattr(cause, "sqlstate", None) == QUERY_CANCELED or getattr(exc, "sqlstate", None) == QUERY_CANCELED
    )


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
        for name, value in request.GET.items():
            if "\x00" in value or "\x00" in name:
                raise BadFilterValue(
                    f"{name}: must not contain NUL characters (Postgres text cannot store them)"
                )
        if request.method not in ("GET", "HEAD"):
            return view()  # operator actions keep their own transactions
        return _with_timeout(view)
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
    except DatabaseError as exc:
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


def _with_timeout(view: Callable[[], HttpResponse]) -> HttpResponse:
    alias = database.current()
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

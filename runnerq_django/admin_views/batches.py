"""Batch handlers in the admin: the detail page of an activity that ran in a batch lists, for each
such attempt, the batch's other members with links to their pages (at most
``storage.batches.MAX_MEMBERS_SHOWN`` each, with the member count). Read from the app's own
``runnerq_batch_runs`` (``storage.batches``)."""

from __future__ import annotations

from typing import Any

from runnerq_django.admin_views import guard
from runnerq_django.models import Activity
from runnerq_django.storage import batches as stored
from runnerq_django.storage.errors import StorageError


def build(activity: Activity) -> dict[str, Any]:
    """``batch_calls``: the batch calls the activity was a member of, newest first."""
    try:
        calls = stored.batches_of(activity.id, using=guard.read_alias())
    except StorageError:  # the table is missing (migrations not run yet): no batches shown
        return {"batch_calls": []}
    return {"batch_calls": calls}

"""Testing your code that enqueues and handles activities, with a worker's semantics.

- :func:`immediate` (or ``RUNNERQ['IMMEDIATE']``): ``enqueue()`` runs the activity at once, in
  this process, after the transaction commits;
- :func:`run_until_idle`: an in-process worker that runs what is due (optionally fast-forwarding
  what is due later) and returns what it ran;
- :class:`Enqueued`: assertions about what was enqueued;
- the pytest plugin (``runnerq_django.testing.pytest_plugin``, registered as a ``pytest11``
  entry point) with the fixtures ``runnerq_immediate``, ``runnerq_worker`` and
  ``runnerq_enqueued``.

Names are imported lazily, so importing this package (as pytest does for the plugin) loads
neither Django nor settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runnerq_django import lazy_exports

if TYPE_CHECKING:  # what type checkers see of the lazy names below
    from runnerq_django.testing.enqueued import Enqueued as Enqueued
    from runnerq_django.testing.enqueued import EnqueuedActivity as EnqueuedActivity
    from runnerq_django.testing.immediate_mode import WaitsForever as WaitsForever
    from runnerq_django.testing.immediate_mode import immediate as immediate
    from runnerq_django.testing.worker import Ran as Ran
    from runnerq_django.testing.worker import run_until_idle as run_until_idle

_EXPORTS = {
    **dict.fromkeys(("immediate", "WaitsForever"), "runnerq_django.testing.immediate_mode"),
    **dict.fromkeys(("run_until_idle", "Ran"), "runnerq_django.testing.worker"),
    **dict.fromkeys(("Enqueued", "EnqueuedActivity"), "runnerq_django.testing.enqueued"),
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

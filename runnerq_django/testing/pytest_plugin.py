"""The pytest plugin (entry point ``pytest11``: ``runnerq_django``): fixtures for testing code
that enqueues and handles activities.

- ``runnerq_immediate``: immediate mode for the test (enqueue runs the activity after commit);
- ``runnerq_worker``: ``runnerq_worker.run_until_idle(...)``, the in-process worker;
- ``runnerq_enqueued``: :class:`~runnerq_django.testing.Enqueued`, assertions about what the test
  enqueued.

All three need the database with real commits (pytest-django's ``transactional_db``, which they
request). Nothing here imports Django until a fixture is used, so the plugin is harmless in
projects (and test runs) without Django or pytest-django.

Internal: not part of the public API.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from runnerq_django.testing.enqueued import Enqueued


def _reset_clocks() -> None:
    from runnerq_django.testing.worker import reset

    reset()


@pytest.fixture
def runnerq_immediate(transactional_db: None) -> Iterator[None]:
    """Immediate mode for this test: ``enqueue()`` runs the activity at once, after commit."""
    from runnerq_django.testing import immediate

    _reset_clocks()
    with immediate():
        yield
    _reset_clocks()


class _Worker:
    """What ``runnerq_worker`` gives a test: :func:`runnerq_django.testing.run_until_idle`."""

    def __init__(self) -> None:
        from runnerq_django.testing import run_until_idle

        self.run_until_idle = run_until_idle


@pytest.fixture
def runnerq_worker(transactional_db: None) -> Iterator[_Worker]:
    """An in-process worker: ``runnerq_worker.run_until_idle(queues=..., fast_forward=...)``."""
    _reset_clocks()
    yield _Worker()
    _reset_clocks()


@pytest.fixture
def runnerq_enqueued(transactional_db: None) -> Enqueued:
    """Assertions about what this test enqueued: ``runnerq_enqueued.assert_enqueued(type=...)``."""
    from runnerq_django.testing import Enqueued

    return Enqueued()

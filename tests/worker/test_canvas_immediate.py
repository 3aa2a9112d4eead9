"""A canvas in immediate mode (the test toolkit): the whole tree runs in the enqueueing process."""

from __future__ import annotations

import pytest

from runnerq_django.canvas.builder import chain, chord, group
from runnerq_django.exceptions import ActivityFailed
from runnerq_django.testing import immediate
from tests.worker import canvas_handlers as h


@pytest.mark.django_db(transaction=True)
def test_a_canvas_runs_to_its_end_in_immediate_mode():
    with immediate():
        handle = chain(h.double.s(2), chord(group([h.double.s(), h.inc.s()]), h.total.s())).enqueue()
        assert handle.result(timeout=5) == 13  # 4 -> [8, 5] -> 13
        failed = chain(h.double.s(1), h.boom.s()).enqueue()
        with pytest.raises(ActivityFailed, match="chain member 1"):
            failed.result(timeout=5)

"""The status sets agree with the models and with the catalog's index predicates."""

from __future__ import annotations

import json
import re

from runnerq_django import models
from runnerq_django.spec import statuses
from tests.helpers import SPEC_DIR

CATALOG = json.loads((SPEC_DIR / "schema/postgres/catalog.json").read_text())


def _predicate_statuses(index_name: str) -> tuple[str, ...]:
    definition = next(i["definition"] for i in CATALOG["indexes"] if i["name"] == index_name)
    return tuple(re.findall(r"'(\w+)'::text", definition.split(" WHERE ", 1)[1]))


def test_runnable_is_the_dequeue_index_predicate():
    assert _predicate_statuses("idx_runnerq_dequeue_order_v2") == statuses.RUNNABLE
    assert _predicate_statuses("idx_runnerq_dequeue_effective_v2") == statuses.RUNNABLE


def test_terminal_is_the_retention_index_predicate():
    assert _predicate_statuses("idx_runnerq_root_terminal") == statuses.TERMINAL


def test_models_use_the_same_sets():
    assert tuple(models.RUNNABLE_STATUSES) == statuses.RUNNABLE
    assert tuple(models.TERMINAL_STATUSES) == statuses.TERMINAL
    assert {value for value, _ in models.Status.choices} == set(statuses.STORED_STATUSES)


def test_terminal_and_runnable_do_not_overlap_and_processing_is_neither():
    assert not set(statuses.RUNNABLE) & set(statuses.TERMINAL)
    assert statuses.PROCESSING not in statuses.RUNNABLE + statuses.TERMINAL
    assert statuses.is_terminal("dead_letter") and not statuses.is_terminal("waiting")

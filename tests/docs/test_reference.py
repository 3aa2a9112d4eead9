"""The generated references (docs/hooks/reference.py) cover everything the code defines: every
RUNNERQ setting, every option of every management command, every stored status and event. The
strict site build (.ci/run) proves they render; these prove nothing is left out."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re

import pytest

from runnerq_django.conf import RULES
from runnerq_django.spec import statuses
from tests.helpers import REPO, SPEC_DIR


def _hook():
    spec = importlib.util.spec_from_file_location("docs_reference_hook", REPO / "docs/hooks/reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hook = _hook()


def _rules(table, path):
    for rule in table.rules:
        if rule.kind == "table":
            yield from _rules(rule, f"{path}['{rule.key}']")
        else:
            yield path, rule


def test_every_setting_is_in_the_settings_reference_with_its_default_and_help():
    page = hook.settings_reference()
    for path, rule in _rules(RULES, "RUNNERQ"):
        heading = f"### `{path}`"
        assert heading in page, path
        table = page.split(heading, 1)[1].split("\n### ", 1)[0]
        row = f"| `{rule.key}` | {hook._code(rule.default)} | {hook._cell(hook.allowed(rule))} | {hook._cell(rule.help)} |"
        assert row in table.splitlines(), f"{path}['{rule.key}']: no row with its default, limits and help"


def test_a_setting_kind_without_wording_fails_the_build():
    with pytest.raises(ValueError, match="no wording"):
        hook.allowed(type("Rule", (), {"kind": "novel", "key": "X", "low": None, "high": None})())


def _options(parser: argparse.ArgumentParser, name: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield f"{name} {sub_name}", None
                yield from _options(sub, f"{name} {sub_name}")
        elif action.help != argparse.SUPPRESS and not set(action.option_strings) & hook.DJANGO_COMMON:
            yield name, action


def test_every_command_and_option_is_in_the_command_reference():
    page = hook.commands_reference()
    names = hook.command_names()
    assert {"runworker", "runscheduler", "runnerq_status", "runnerq_retry", "runnerq_schema"} <= set(names)
    for name in names:
        assert f"## `{name}`" in page, name
        for where, action in _options(hook.command_parser(name), name):
            if action is None:
                assert f"`{where}`" in page, where  # a subcommand's own section
            elif action.option_strings:
                for option in action.option_strings:
                    assert f"`{option}`" in page, (where, option)
            else:
                assert f"| `{action.metavar or action.dest}` |" in page, (where, action.dest)


def test_every_status_and_event_is_in_the_events_reference():
    status_rows = hook.statuses_reference()
    for status in statuses.STORED_STATUSES:
        assert f"| `{status}` |" in status_rows, status
    events = json.loads((SPEC_DIR / "schema/postgres/events.schema.json").read_text())["$defs"]
    page = hook.events_reference()
    for event, schema in events.items():
        assert f"### `{event}`" in page, event
        for field in schema.get("properties", {}):
            assert f"| `{field}` |" in page, (event, field)


def test_every_public_module_has_an_api_page():
    from tests.client.test_public_api import PUBLIC_MODULES

    pages = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "docs/reference/api").glob("*.md"))
    documented = set(re.findall(r"^::: (\S+)$", pages, re.M))
    # The package root re-exports names of the other modules: its table is on api/index.md.
    missing = [m for m in PUBLIC_MODULES if m != "runnerq_django" and m not in documented]
    assert not missing, f"add a '::: module' block under docs/reference/api/ for {missing}"
    assert "`runnerq_django`" in (REPO / "docs/reference/api/index.md").read_text(encoding="utf-8")


def test_ci_builds_the_site_strict_and_counts_its_warnings():
    builds = [line for line in (REPO / ".ci/run").read_text().splitlines() if "mkdocs build" in line]
    assert len(builds) == 1 and "--strict" in builds[0], builds
    # With --quiet MkDocs drops warnings before its strict-mode counter sees them.
    assert "--quiet" not in builds[0] and " -q" not in builds[0], builds


def test_every_activity_option_is_in_the_options_reference_with_its_places():
    from runnerq_django.activities import options

    page = hook.options_reference()
    rows = {line.split(" | ", 1)[0].removeprefix("| `").removesuffix("`"): line for line in page.splitlines()}
    assert set(options.OPTIONS) <= set(rows)
    for name, option in options.OPTIONS.items():
        cells = [cell.strip() for cell in rows[name].strip("|").split(" | ")]
        assert cells[1] == hook._cell(hook.option_takes(option)), name
        marks = cells[3 : 3 + len(options.PLACES)]
        assert [bool(mark) for mark in marks] == [place in option.places for place in options.PLACES], name
    # The settings reference's RUNNERQ['TYPES'] row names the keys an entry takes, from the same place.
    types = next(rule for rule in RULES.rules if rule.key == "TYPES")
    assert all(f"`{name}`" in hook.allowed(types) for name in options.at(options.TYPES))
    assert "<!-- runnerq:options -->" in (REPO / "docs/reference/options.md").read_text()

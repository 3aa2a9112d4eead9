"""The README is a package page: at most 200 lines, its links resolve, and the commands it gives
are the ones CI and the tests run."""

from __future__ import annotations

import re

from tests.helpers import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def test_the_readme_fits_a_package_page():
    assert len(README.splitlines()) <= 200


def test_ci_runs_exactly_the_readme_test_command():
    commands = [line.strip() for line in _section("Test").splitlines() if line.startswith("    ")]
    assert commands == ["pytest"], commands
    ci = (REPO / ".ci/run").read_text(encoding="utf-8").splitlines()
    assert commands[0] in ci, ".ci/run must run the README's test command as it is written"


def test_the_readme_run_command_is_the_one_the_tests_run():
    # tests/worker/test_commands.py::test_the_readme_run_command_processes_the_examples runs it.
    assert "    python manage.py runworker --migrate\n" in _section("Run")
    assert '    pip install -e ".[dev]"\n' in _section("Run")


def test_every_relative_link_of_the_readme_resolves():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    relative = [link for link in links if "://" not in link]
    assert relative, "the README links into the docs"
    missing = [link for link in relative if not (REPO / link).exists()]
    assert not missing, missing

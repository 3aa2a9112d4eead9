"""The typing of keyword-argument handlers, as mypy sees it: ``typing_cases.py`` is checked with
``mypy --strict`` and every error and revealed type must be the one its line says (no more)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api", reason="mypy is in the dev extra")

CASES = Path(__file__).with_name("typing_cases.py")
REPO = CASES.parents[2]
EXPECTED = re.compile(r"#\s*([EN]): (.*)$")


def expected() -> dict[tuple[int, str], str]:
    found = {}
    for number, line in enumerate(CASES.read_text().splitlines(), start=1):
        match = EXPECTED.search(line)
        if match:
            found[(number, "error" if match[1] == "E" else "note")] = match[2].strip()
    return found


def reported(output: str) -> dict[tuple[int, str], str]:
    found = {}
    for line in output.splitlines():
        match = re.match(rf"{re.escape(str(CASES))}:(\d+): (error|note): (.*?)(  \[[a-z-]+\])?$", line)
        if match and (match[2] == "error" or match[3].startswith("Revealed type is ")):
            # (other notes explain an error: the overload variants, where a function is defined)
            message = match[3]
            if match[2] == "note":
                message = message.removeprefix("Revealed type is ").strip('"')
            found[(int(match[1]), match[2])] = message
    return found


@pytest.fixture
def recursion_limit_kept():
    """mypy's main raises sys.setrecursionlimit() to 16384 and leaves it there; later tests in this
    process rely on the default (the JSON parser refuses 3000-deep values only under it)."""
    limit = sys.getrecursionlimit()
    yield
    sys.setrecursionlimit(limit)


def test_mypy_sees_the_handlers_arguments_and_result_types(tmp_path, recursion_limit_kept):
    stdout, stderr, _ = mypy_api.run(
        [
            str(CASES),
            "--strict",
            "--config-file=",  # not the project's (its Django plugin needs settings); strict is all this needs
            "--follow-imports=silent",
            "--show-absolute-path",
            f"--cache-dir={tmp_path / 'mypy'}",
        ]
    )
    got = reported(stdout)
    want = expected()
    assert len(want) >= 15  # the cases file was read
    # mypy may add a suggestion ("; did you mean ...?") after what the case expects
    matched = {key: want[key] if (got.get(key) or "").startswith(want[key]) else got.get(key) for key in want}
    assert matched == want, stdout + stderr
    unexpected = {key: value for key, value in got.items() if key not in want}
    assert unexpected == {}, stdout

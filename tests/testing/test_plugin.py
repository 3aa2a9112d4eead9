"""The pytest plugin: registered by its module path (the pytest11 entry point's name) and
harmless without Django."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.helpers import REPO

PLUGIN = "runnerq_django.testing.pytest_plugin"


def test_the_entry_point_names_the_plugin_by_its_module_path():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["pytest11"] == {PLUGIN: PLUGIN}
    assert f"-p {PLUGIN}" in project["tool"]["pytest"]["ini_options"]["addopts"]


def test_the_plugin_loads_in_a_project_without_django(tmp_path):
    (tmp_path / "test_plain.py").write_text(
        "import sys\ndef test_plain():\n    assert 'django' not in sys.modules\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:django",
            "-p",
            "no:cacheprovider",
            "-p",
            PLUGIN,
            "--fixtures",
            str(tmp_path / "test_plain.py"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for fixture in ("runnerq_immediate", "runnerq_worker", "runnerq_enqueued"):
        assert fixture in result.stdout
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:django",
            "-p",
            "no:cacheprovider",
            "-p",
            PLUGIN,
            str(tmp_path / "test_plain.py"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout + result.stderr

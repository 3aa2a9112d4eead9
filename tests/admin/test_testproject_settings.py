"""The test project is safe by default: DEBUG off (a technical 500 page would show DATABASE_URL
with its password to any user who triggers one) and only local host names accepted."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import REPO, manage_env

READ = "import json, testproject.settings as s; print(json.dumps([s.DEBUG, s.ALLOWED_HOSTS]))"


def settings_under(**env: str) -> list:
    environ = manage_env()
    for name in ("DJANGO_DEBUG", "DJANGO_ALLOWED_HOSTS"):
        environ.pop(name, None)
    environ.update(env)
    out = subprocess.run(
        [sys.executable, "-c", READ],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_debug_is_off_and_hosts_are_local_unless_the_environment_says_otherwise():
    assert settings_under() == [False, ["localhost", "127.0.0.1", "[::1]"]]
    assert settings_under(DJANGO_DEBUG="1", DJANGO_ALLOWED_HOSTS="example.com,.example.org") == [
        True,
        ["example.com", ".example.org"],
    ]

"""The set-up snippets of the quick start, the README and the how-tos work as printed: the
periodic jobs' CACHES starts Django, the wheel is installed from where the build writes it, and
the testing how-to's set-up runs its test in a new project."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import uuid

from django.core.checks.caches import check_default_cache_is_configured
from django.test import override_settings

import runnerq_django
from tests.helpers import REPO

DOCS = REPO / "docs"


def code_blocks(page: str, language: str) -> list[str]:
    text = (DOCS / page).read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)


def test_the_periodic_jobs_caches_keep_a_default_and_give_the_scheduler_a_redis_database_of_its_own():
    (snippet,) = [
        block for block in code_blocks("how-to/periodic-jobs.md", "python") if "CACHES = {" in block
    ]
    scope: dict = {}
    exec(snippet, scope)
    caches = scope["CACHES"]
    with override_settings(CACHES=caches):
        assert check_default_cache_is_configured(None) == []  # Django starts (no caches.E001)
    location = caches["runnerq_scheduler"]["LOCATION"]
    assert not location.endswith("/0"), "db 0 is where other caches and brokers live by default"


def test_the_wheel_is_installed_from_where_the_build_writes_it():
    wheel = f"runnerq_django-{runnerq_django.__version__}-py3-none-any.whl"
    for page in (REPO / "README.md", DOCS / "quickstart.md"):
        text = page.read_text(encoding="utf-8")
        installs = re.findall(r'pip install "\./([^"\[]+)', text)
        assert f"dist/{wheel}" in installs, (page, installs)
        assert all(path.startswith("dist/") for path in installs), (page, installs)


def test_the_quick_start_says_the_worker_needs_a_terminal_of_its_own():
    text = (DOCS / "quickstart.md").read_text(encoding="utf-8")
    assert "**two terminals**" in text


def test_the_testing_set_up_runs_its_test_in_a_new_project(tmp_path):
    """A project as the quick start makes it (its `shop.greet` handler), plus the testing
    how-to's pytest.ini and test module, run by pytest in a process of its own."""
    from django.db import connection

    (ini,) = code_blocks("how-to/testing.md", "ini")
    (test,) = [block for block in code_blocks("how-to/testing.md", "python") if "# shop/tests.py" in block]
    (handler,) = [
        block for block in code_blocks("quickstart.md", "python") if "# shop/activities.py" in block
    ]
    settings = connection.settings_dict
    name = f"rq_doc_{uuid.uuid4().hex[:12]}"  # pytest-django makes and drops test_<name>
    (tmp_path / "mysite").mkdir()
    (tmp_path / "mysite" / "__init__.py").write_text("")
    (tmp_path / "mysite" / "settings.py").write_text(
        textwrap.dedent(f"""
            SECRET_KEY = "not secret"
            USE_TZ = True
            INSTALLED_APPS = ["django.contrib.contenttypes", "runnerq_django", "shop"]
            DATABASES = {{"default": {{
                "ENGINE": "django.db.backends.postgresql", "NAME": {name!r},
                "USER": {settings["USER"]!r}, "PASSWORD": {settings["PASSWORD"]!r},
                "HOST": {settings["HOST"]!r}, "PORT": {str(settings["PORT"] or "")!r},
            }}}}
        """)
    )
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").write_text("")
    (tmp_path / "shop" / "activities.py").write_text(handler)
    (tmp_path / "shop" / "tests.py").write_text(test)
    (tmp_path / "pytest.ini").write_text(ini)
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO)])
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout

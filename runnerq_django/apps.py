"""The Django app configuration (``INSTALLED_APPS = [..., "runnerq_django"]``).

Internal: not part of the public API.
"""

from importlib import import_module

from django.apps import AppConfig


class RunnerQConfig(AppConfig):
    name = "runnerq_django"
    label = "runnerq_django"
    verbose_name = "RunnerQ"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # RUNNERQ['IMMEDIATE'] names a test mode, as TASKS names a django.tasks backend: loaded by
        # its path when the setting is on, never otherwise. It receives signals.activity_enqueued.
        from django.conf import settings

        from runnerq_django import (
            checks,  # noqa: F401  (registers the system checks)
            client,  # noqa: F401  (installs itself for ActivityDefinition.enqueue and handles)
            conf,  # noqa: F401  (hands the storage layer its settings)
        )
        from runnerq_django.canvas import orchestrator  # noqa: F401  (registers the built-in orchestrator)
        from runnerq_django.management.deploy_check import register_check
        from runnerq_django.progress import readers  # noqa: F401  (installs handle.progress() and .events())

        register_check()  # runnerq.W030 under check --deploy
        from runnerq_django.scheduler import checks as scheduler_checks  # noqa: F401  (registers its checks)

        runnerq = getattr(settings, "RUNNERQ", None)
        if isinstance(runnerq, dict) and runnerq.get("IMMEDIATE") is True:
            import_module("runnerq_django.testing.immediate_mode")

        from runnerq_django.activities.registry import autodiscover

        # Import each installed app's ``activities`` module, as the admin does with ``admin.py``:
        # every process (web and worker) then knows the same handlers and their defaults.
        autodiscover()
        # A django.tasks backend of ours in TASKS: load it now, so that its resolver lets a worker
        # run @task functions by module path (runworker -t app.tasks.fn) before anything imports them.
        backends = getattr(settings, "TASKS", None) or {}
        if any(
            str(b.get("BACKEND", "")).startswith("runnerq_django.tasks_backend.")
            for b in backends.values()
            if isinstance(b, dict)
        ):
            try:
                import runnerq_django.tasks_backend  # noqa: F401
            except ImportError as exc:  # Django 5.2 without the backport: using TASKS will say so
                if exc.name != "django_tasks":
                    raise

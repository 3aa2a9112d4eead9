"""The Django app configuration (``INSTALLED_APPS = [..., "runnerq_django"]``).

Internal: not part of the public API.
"""

from django.apps import AppConfig


class RunnerQConfig(AppConfig):
    name = "runnerq_django"
    label = "runnerq_django"
    verbose_name = "RunnerQ"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from runnerq_django import (
            checks,  # noqa: F401  (registers the system checks)
            client,
            conf,  # noqa: F401  (hands the storage layer its settings)
        )
        from runnerq_django.canvas import orchestrator  # noqa: F401  (registers the built-in orchestrator)
        from runnerq_django.scheduler import checks as scheduler_checks  # noqa: F401  (registers its checks)
        from runnerq_django.testing import immediate_mode

        # The layers below learn of the ones above here, not by importing them: loading the
        # client installs it for ActivityDefinition.enqueue, and immediate mode hooks enqueues.
        client.on_enqueued(immediate_mode.enqueued)
        from runnerq_django.activities.registry import autodiscover

        # Import each installed app's ``activities`` module, as the admin does with ``admin.py``:
        # every process (web and worker) then knows the same handlers and their defaults.
        autodiscover()
        # A django.tasks backend of ours in TASKS: load it now, so that its resolver lets a worker
        # run @task functions by module path (runworker -t app.tasks.fn) before anything imports them.
        from django.conf import settings

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

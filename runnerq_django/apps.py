from django.apps import AppConfig


class RunnerQConfig(AppConfig):
    name = "runnerq_django"
    label = "runnerq_django"
    verbose_name = "RunnerQ"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from runnerq_django import checks  # noqa: F401  (registers the system checks)
        from runnerq_django.registry import autodiscover

        # Import each installed app's ``activities`` module, as the admin does with ``admin.py``:
        # every process (web and worker) then knows the same handlers and their defaults.
        autodiscover()

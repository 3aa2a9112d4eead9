from django.apps import AppConfig


class ExamplesConfig(AppConfig):
    name = "testproject.examples"
    label = "examples"
    verbose_name = "RunnerQ examples"

    def ready(self) -> None:
        from testproject.examples import receivers  # noqa: F401  (connects the worker_started receiver)

"""System checks of runnerq_django: the RUNNERQ setting and the live schema."""

from django.core import checks


@checks.register("runnerq")
def check_settings(app_configs, **kwargs):
    from runnerq_django import conf

    return [checks.Error(message, id="runnerq.E001") for message in conf.validate()]

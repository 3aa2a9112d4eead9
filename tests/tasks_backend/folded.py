"""Tasks of the "folding" backend (the check test configures it before importing this module):
Django priorities 2 and 10 share RunnerQ's level 3, -5 has level 1 to itself."""

try:  # Django 6+
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task


@task(backend="folding", priority=2)
def routine():
    return "routine"


@task(backend="folding", priority=10)
def urgent():
    return "urgent"


@task(backend="folding", priority=-5)
def whenever():
    return "whenever"

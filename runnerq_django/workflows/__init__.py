"""Steering finished workflows: re-running a run from a step (``forks``), keeping the earlier
steps' checkpoints and children.

Public: ``forks``. Version gates are ``activities.versions``; the deploy check is
``management.deploy_check``.
"""

from runnerq_django.workflows.forks import fork, forks_of, steps_of

__all__ = ["fork", "forks_of", "steps_of"]

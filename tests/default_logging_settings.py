"""The test project as a new project has it: no ``LOGGING`` of its own, so Django's default
logging applies (the ``runnerq_django`` loggers reach Python's last-resort handler, which prints
a WARNING's message and nothing else)."""

from testproject.settings import *  # noqa: F403

del LOGGING  # noqa: F821

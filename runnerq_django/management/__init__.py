"""Management commands of runnerq_django.

Internal: not part of the public API. The commands' command lines (``--help``) are the interface.
"""

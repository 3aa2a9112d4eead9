"""Pieces of the admin console (``runnerq_django.admin``): read queries built for large tables,
changelist helpers, the detail page's data, the operator actions and the scheduler page.

Internal: not part of the public API.
"""

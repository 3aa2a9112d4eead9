"""Imported by the forkserver of process-mode handlers (``worker/isolation.py``): sets Django up
once there, from the worker's ``DJANGO_SETTINGS_MODULE`` (inherited), so that every child forked
from it starts with settings and apps ready.

Internal: not part of the public API.
"""

from __future__ import annotations

import django
from django.apps import apps

if not apps.ready:
    django.setup()

"""Postgres LISTEN/NOTIFY: the session that listens (``notify``) and the result waits that share
one listening connection per process (``result_notices``). The worker's wake-up listener
(``runnerq_django.worker.listener``) uses ``notify`` too.

Internal: not part of the public API.
"""

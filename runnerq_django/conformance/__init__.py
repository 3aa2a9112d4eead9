"""The RunnerQ conformance driver (``manage.py runnerq_driver``): the spec's line protocol.

Internal: not part of the public API. Conformance runners speak to it over stdin/stdout; its
Python names may change in any release.
"""

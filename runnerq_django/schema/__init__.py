"""The RunnerQ tables themselves: the spec's DDL (``ddl``), the comparison of a live database with
the spec's catalogue (``compare``) and the migration procedure that applies the one and checks
with the other (``migrator``). ``manage.py runnerq_schema`` and ``migrate`` drive them.

Internal: not part of the public API.
"""

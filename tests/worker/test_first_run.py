"""First-run mistakes end in one line that says what to do, with exit status 78 (real processes):
a database without the RunnerQ tables, one that does not exist. A server that does not answer is
an outage, not a mistake: status 69 (the services wait for it first, tests/worker/test_startup_outage.py)."""

from __future__ import annotations

import pytest

from tests.helpers import free_port, manage, manage_env, scratch_database, with_dbname

pytestmark = pytest.mark.slow  # every case starts manage.py processes

MIGRATE = 'run "python manage.py migrate" or "runworker --migrate"'
SOME_ID = "00000000-0000-4000-8000-000000000000"
COMMANDS = [
    ["runworker"],
    ["runworker", "--processes", "2"],
    ["runscheduler"],
    ["runnerq_status"],
    ["runnerq_schedule"],
    ["runnerq_enqueue", "t.echo"],
    ["runnerq_retry", SOME_ID],
    ["runnerq_cancel", SOME_ID],
    ["runnerq_cleanup"],
    ["runnerq_reap"],
]


@pytest.fixture(scope="module")
def never_migrated_db(pg_servers) -> str:
    """A database on the test server with no tables at all, created once for the module (a
    CREATE and a DROP DATABASE per test cost more than the commands they check)."""
    with scratch_database(pg_servers[0][1], prefix="rq_no_tables") as url:
        yield url


@pytest.fixture
def empty_db_url(never_migrated_db) -> str:
    """The never-migrated database, checked to be still without a single relation (no command
    of an earlier test created one)."""
    import psycopg

    with psycopg.connect(never_migrated_db, autocommit=True) as conn:
        relations = conn.execute(
            "SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname <> 'information_schema' AND n.nspname NOT LIKE %s",
            ["pg\\_%"],  # not the catalogs (pg_catalog, pg_toast)
        ).fetchall()
    assert relations == [], f"the never-migrated database has relations: {relations}"
    return never_migrated_db


def run(args, url):
    return manage(*args, env=manage_env(url, RUNNERQ_EXAMPLES="0"), check=False, timeout=120)


def only_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def _address(url: str) -> str:
    """The host:port the commands name: the test server's (PgBouncer's, behind it)."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(url)
    return f"{params.get('host', '127.0.0.1')}:{params.get('port', 5432)}"


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_database_without_the_tables_is_one_line_naming_the_fix(empty_db_url, args):
    result = run(args, empty_db_url)
    from psycopg.conninfo import conninfo_to_dict

    name = conninfo_to_dict(empty_db_url)["dbname"]
    assert result.returncode == 78, result.stderr
    assert only_line(result) == (
        f'CommandError: the RunnerQ tables are missing from database "{name}" at {_address(empty_db_url)}: {MIGRATE}'
    )


def test_enqueue_without_the_tables_raises_schema_missing(empty_db_url):
    code = (
        "from runnerq_django import SchemaMissing, enqueue\n"
        "try:\n    enqueue('t.echo', {})\n"
        "except SchemaMissing as exc:\n    print('SchemaMissing:', exc)\n"
    )
    result = run(["shell", "-c", code], empty_db_url)
    assert result.returncode == 0, result.stderr
    assert (
        f'SchemaMissing: the RunnerQ tables are missing (relation "runnerq_activities" does not exist): '
        f"{MIGRATE}"
    ) in result.stdout, result.stdout


@pytest.mark.parametrize("args", [["runnerq_status"], ["runnerq_retry", SOME_ID]], ids=" ".join)
def test_a_server_that_does_not_answer_is_one_line_naming_host_port_and_database(args):
    port = free_port()  # nothing listens there
    result = run(args, f"postgres://rq_user:s3cret-pw@127.0.0.1:{port}/shop")
    assert result.returncode == 69, result.stderr  # EX_UNAVAILABLE: an operator command doesn't wait
    line = only_line(result)
    assert line.startswith(f'CommandError: can\'t connect to database "shop" at 127.0.0.1:{port}: '), line
    assert "Connection refused" in line and "s3cret-pw" not in line


def test_a_database_that_does_not_exist_is_one_line(empty_db_url):
    result = run(["runworker", "--migrate"], with_dbname(empty_db_url, "no_such_database"))
    assert result.returncode == 78, result.stderr
    line = only_line(result)
    assert line.startswith(
        f'CommandError: can\'t connect to database "no_such_database" at {_address(empty_db_url)}: '
    ), line
    assert 'database "no_such_database" does not exist' in line

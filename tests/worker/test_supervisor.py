"""``runworker --processes N``: options checked before any child starts, restarts with backoff
whatever a child's exit status, no restart into a configuration error. Real processes throughout."""

from __future__ import annotations

import itertools
import json
import os
import signal
import sys
import threading
import time

import pytest

from runnerq_django.worker.supervisor import EX_CONFIG, Supervisor
from tests.helpers import manage, manage_env, wait_until
from tests.worker import handlers
from tests.worker.support import runs, status_of

TEST_SETTINGS = "tests.worker.settings"


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["-p", "2", "-t", "nope.type"],
            "--activity-type names types with no handler in this process: nope.type",
        ),
        (["-p", "2", "-q", "bad-queue"], "--queue: must be 1-48 characters"),
        (
            ["-p", "2", "--database", "nope"],
            "--database: unknown database alias 'nope' (DATABASES has: default)",
        ),
        (["--metrics-port", "-5"], "--metrics-port must be 1..65535, got -5"),
        (["-p", "3", "--metrics-port", "65534"], "would need ports up to 65536"),
        (["-p", "2", "--lease", "100000"], "--lease must be 0.1..86400 seconds"),
        (["-p", "2", "--import", "no_such_module_here"], "--import no_such_module_here: No module named"),
    ],
)
def test_bad_options_are_refused_before_any_child_starts(live_db_url, args, message):
    began = time.monotonic()
    result = manage(
        "runworker",
        "--import",
        "tests.worker.handlers",
        *args,
        db_url=live_db_url,
        check=False,
        timeout=30,
        env=manage_env(live_db_url, RUNNERQ_EXAMPLES="0"),
    )
    assert result.returncode == EX_CONFIG, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr and "supervisor.child_started" not in result.stderr
    assert time.monotonic() - began < 15


@pytest.mark.parametrize("args", [["--poll-interval", "nan"], ["--shutdown-grace", "-1"], ["-p", "0"]])
def test_malformed_numbers_are_usage_errors(args):
    result = manage("runworker", *args, check=False, timeout=30)
    assert result.returncode == 2 and "error: argument" in result.stderr and "Traceback" not in result.stderr


def test_a_child_with_a_configuration_error_is_not_restarted(live_db_url):
    """Only the children see the bad setting (the parent checked its own): the supervisor must
    stop at the first configuration error instead of restarting into it every second."""
    env = manage_env(
        live_db_url,
        RUNNERQ_EXAMPLES="0",
        DJANGO_SETTINGS_MODULE=TEST_SETTINGS,
        RUNNERQ_TEST_CHILD_SETTINGS=json.dumps({"LEASE_SECONDS": -1}),
    )
    began = time.monotonic()
    result = manage(
        "runworker", "--import", "tests.worker.handlers", "-p", "2", check=False, timeout=60, env=env
    )
    assert time.monotonic() - began < 30
    assert result.returncode == EX_CONFIG
    assert "RUNNERQ['LEASE_SECONDS'] must be a positive number" in result.stderr  # the child's own message
    assert "is not restarted: it exited with a configuration error (status 78)" in result.stderr
    assert result.stderr.count("supervisor.child_started") == 2  # the two first starts, no restart


def _recording_child(path) -> list[str]:
    """A child that notes when it started and dies at once with status 3 (a crash)."""
    code = "import sys, time; open(sys.argv[1], 'a').write(f'{time.monotonic()}\\n'); sys.exit(3)"
    return [sys.executable, "-c", code, str(path)]


def test_children_that_keep_dying_are_restarted_with_backoff_and_never_given_up(tmp_path):
    """A crash loop (status 3, here) is restarted for as long as it lasts, the pauses capped: an
    outage or a bad deploy that ends must not leave a pool stopped for good."""
    starts = tmp_path / "starts"
    supervisor = Supervisor(
        [[]], program=_recording_child(starts), first_backoff=0.2, max_backoff=0.8, stable_seconds=30
    )

    def stop_after_eight_starts():
        wait_until(lambda: starts.exists() and len(starts.read_text().split()) >= 8, timeout=30)
        supervisor._request_stop("SIGTERM")

    watcher = threading.Thread(target=stop_after_eight_starts, daemon=True)
    watcher.start()
    supervisor.run()
    watcher.join()
    assert supervisor.gave_up is None
    times = [float(line) for line in starts.read_text().split()]
    assert len(times) >= 8  # well past the five quick deaths the parent once gave up after
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    for gap, pause in zip(gaps, [0.2, 0.4, 0.8, 0.8, 0.8, 0.8, 0.8]):  # doubling, capped
        assert gap >= pause, gaps


def test_a_usage_error_of_a_child_stops_the_others():
    # Child 0 runs (sleeps); child 1 exits as argparse does on a bad command line. Children start
    # with the stop signals blocked until they can stop gracefully (runworker unblocks them once
    # its handlers are installed); this stand-in unblocks them at once, so SIGTERM ends it.
    program = [
        sys.executable,
        "-c",
        "import signal, sys, time; signal.pthread_sigmask(signal.SIG_UNBLOCK, "
        "{signal.SIGTERM}); sys.exit(2) if sys.argv[1] == 'usage' else time.sleep(60)",
    ]
    supervisor = Supervisor([["sleep"], ["usage"]], program=program, first_backoff=0.1)
    began = time.monotonic()
    assert supervisor.run() == EX_CONFIG
    assert time.monotonic() - began < 10  # the sleeping child was stopped, not waited for
    assert "worker process 1" in supervisor.gave_up and "a usage error (status 2)" in supervisor.gave_up
    assert supervisor.children[0].returncode == -15  # SIGTERM


def _children_of(pid: int) -> list[int]:
    """Live (not zombie) child processes of ``pid``, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                state, ppid = stat.read().rsplit(")", 1)[1].split()[:2]
        except OSError:
            continue
        if int(ppid) == pid and state != "Z":
            found.append(int(entry))
    return sorted(found)


@pytest.mark.slow
def test_a_killed_child_is_restarted_and_sigterm_drains_every_child(worker_process):
    proc = worker_process(
        "--processes", "2", "--shutdown-grace", "10", "--poll-interval", "0.2", "--concurrency", "2"
    )
    first = wait_until(
        lambda: len(c := _children_of(proc.pid)) == 2 and proc.log().count("worker.started") == 2 and c,
        timeout=30,
        message="two worker processes",
    )
    os.kill(first[0], signal.SIGKILL)
    children = wait_until(
        lambda: (
            len(c := _children_of(proc.pid)) == 2
            and first[0] not in c
            and proc.log().count("worker.started") == 3
            and c
        ),
        timeout=30,
        message="the restart",
    )
    assert first[1] in children  # the other one ran on
    assert f"supervisor.child_exited index=0 pid={first[0]} code=-9" in proc.log()
    # A handler mid-run when the parent gets SIGTERM: forwarded, drained within the grace.
    handle = handlers.slow.enqueue({"seconds": 1.5})
    wait_until(lambda: runs("start", handle.id), timeout=20, message="the handler to start")
    proc.send_signal(signal.SIGTERM)  # the parent only: it forwards one signal to each child
    assert proc.wait(30) == 0
    assert status_of(handle.id) == "completed" and len(runs("end", handle.id)) == 1  # finished, not released
    assert not _children_of(proc.pid) and not any(os.path.exists(f"/proc/{pid}") for pid in children)
    log = proc.log()
    assert log.count("worker.stopping") == 2 and log.count("worker.stopped") == 2
    assert "supervisor.stopped codes=0,0" in log

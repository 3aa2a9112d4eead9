"""``manage.py runnerq_fork ID --from-step STEP``: re-run a workflow from a step."""

from __future__ import annotations

import getpass
import json
from typing import Any

from django.core.management.base import CommandParser

from runnerq_django.management.commands._operator import OperatorCommand


class Command(OperatorCommand):
    help = (
        "Re-run the root activity ID from one of its steps: a new activity of the same type, queue and "
        "input (or --payload) keeps the steps recorded before --from-step (their checkpoints copied, "
        "the children they spawned reused) and runs that step and the rest again. The original must "
        "have ended; --cancel-running cancels one still running or parked first. Without --from-step "
        "(or with --list) it lists the run's steps. The fork is ledgered with --actor and --reason."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("id", metavar="ID", help="The root activity to fork.")
        parser.add_argument(
            "--from-step", default=None, help="The step to run again from: NAME or KIND:NAME."
        )
        parser.add_argument(
            "--list", action="store_true", help="List the run's steps in order; fork nothing."
        )
        parser.add_argument(
            "--payload", default=None, help="The fork's input as JSON (default: the original's)."
        )
        parser.add_argument(
            "--cancel-running", action="store_true", help="Cancel the original first if it has not ended."
        )
        parser.add_argument("--actor", default=None, help="Who forks it (default: the OS user).")
        parser.add_argument("--reason", default=None, help="Why, recorded in the forks' ledger.")
        self.add_common(parser, dry_run=False)

    def handle(self, *args: Any, **options: Any) -> None:
        from runnerq_django.workflows import forks

        queue = self.queue(options)
        alias = self.alias(options, queue)
        (activity_id,) = self.ids(options, [options["id"]])
        from runnerq_django.client import get_handle

        handle = get_handle(activity_id, queue, using=alias)
        if options["list"] or not options["from_step"]:
            steps = self.checked(options, lambda: forks.steps_of(handle))
            self.emit(
                options,
                {
                    "id": str(activity_id),
                    "steps": [
                        {
                            "step": s.label,
                            "at": s.at.isoformat(),
                            **({"child": str(s.child_id)} if s.child_id else {}),
                        }
                        for s in steps
                    ],
                },
                [f"Steps of {activity_id} (oldest first):"]
                + [
                    f"  {s.at:%Y-%m-%d %H:%M:%S}  {s.label}" + (f"  -> {s.child_id}" if s.child_id else "")
                    for s in steps
                ],
            )
            return
        extra: dict[str, Any] = {}
        if options["payload"] is not None:
            try:
                extra["payload"] = json.loads(options["payload"])
            except json.JSONDecodeError as exc:
                self.fail(options, f"--payload is not valid JSON: {exc.msg}", field="payload")
        actor = options["actor"] if options["actor"] is not None else _os_user()
        made = self.checked(
            options,
            lambda: forks.fork(
                handle,
                options["from_step"],
                cancel_running=options["cancel_running"],
                actor=actor,
                reason=options["reason"],
                using=alias,
                **extra,
            ),
        )
        self.emit(
            options,
            {"id": str(activity_id), "fork": str(made.id), "queue": queue, "from_step": options["from_step"]},
            [
                f"Forked {activity_id} from step {options['from_step']}: new activity {made.id} on queue {queue}."
            ],
        )


def _os_user() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # no user name in this environment
        return "cli"

"""MkDocs hook: the settings and command references, generated at build time from the code.

The settings tables come from ``runnerq_django.conf.RULES`` (the table the system checks and the
commands' bounds read) and the command pages from each management command's own argparse parser,
so neither can drift from what the code accepts: nothing generated is committed. A page asks for
a table with a marker line, replaced here before Markdown is rendered:

    <!-- runnerq:settings -->         every RUNNERQ setting, one table per nested dict
    <!-- runnerq:commands -->         every runnerq_django management command, one section each
    <!-- runnerq:statuses -->         every stored status (runnerq_django.spec.statuses)
    <!-- runnerq:events -->           every stored event and its fields (the spec's events.schema.json)
    <!-- runnerq:options -->          every activity option and where it may be given
                                      (runnerq_django.activities.options, the declaration every place reads)

``tests/docs/test_reference.py`` checks that every setting and every option appears.
"""

from __future__ import annotations

import argparse
import os
import pkgutil
import re

SETTINGS_MARKER = "<!-- runnerq:settings -->"
COMMANDS_MARKER = "<!-- runnerq:commands -->"
STATUSES_MARKER = "<!-- runnerq:statuses -->"
EVENTS_MARKER = "<!-- runnerq:events -->"
OPTIONS_MARKER = "<!-- runnerq:options -->"
# What each stored status means; a status the code stores and this table lacks fails the build.
STATUS_MEANINGS = {
    "pending": "Runnable now: enqueued without a delay, released by a stopping worker, or woken from a wait.",
    "scheduled": "Runnable once `scheduled_at` is reached: enqueued with a delay, or rescheduled.",
    "retrying": "A retryable failure; runnable again at `scheduled_at` (the backoff). Reported as `scheduled`.",
    "processing": "Claimed by a worker, under a lease it renews. Reported as `running`.",
    "waiting": "Parked by a durable sleep, a signal wait or an await of another activity: no thread, no "
    "lease, no attempt used. `scheduled_at` is the wake-up (a timeout), or NULL: woken by what it waits for.",
    "completed": "Finished with a result (terminal).",
    "failed": "A non-retryable failure: `NonRetryableError`, a result JSON can't store, an internal "
    "error (terminal).",
    "dead_letter": "Retryable failures until `max_attempts` ran out, or the last attempt's lease expired "
    "(terminal; `runnerq_retry` or the admin's redrive runs it again).",
    "cancelled": "Cancelled by `cancel()`, the admin or `runnerq_cancel`, with its unfinished descendants "
    "(terminal).",
}
# Django's options every command has; listed once on the page, not under each command.
DJANGO_COMMON = {
    "--help",
    "--version",
    "--verbosity",
    "--settings",
    "--pythonpath",
    "--traceback",
    "--no-color",
    "--force-color",
    "--skip-checks",
}


def setup_django() -> None:
    """Settings with nothing but the app, so defaults shown are the package's, not a project's.
    No database is opened: building a parser does not connect."""
    import django
    from django.conf import settings

    if not settings.configured:
        os.environ.pop("DJANGO_SETTINGS_MODULE", None)
        settings.configure(
            INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "runnerq_django"],
            DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "runnerq_docs"}},
            USE_TZ=True,
        )
        django.setup()


# --- settings -------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell: outside code spans, brackets and stars escaped
    (RUNNERQ['SCHEDULER']['JOBS'] would read as a reference link, 2**53 as emphasis)."""
    parts = re.split(r"(`[^`]*`)", text.replace("\n", " "))
    for i in range(0, len(parts), 2):
        for char in "\\[]*":
            parts[i] = parts[i].replace(char, "\\" + char)
        parts[i] = parts[i].replace("<", "&lt;")
    return "".join(parts).replace("|", "\\|")


def _code(value: object) -> str:
    text = repr(value)
    # A code span can't hold a backtick run it doesn't exceed; none of the defaults has one.
    return f"`{text}`".replace("|", "\\|")


def allowed(rule) -> str:
    """What a value of ``rule`` must be, in words (the same limits ``Rule.problem`` enforces)."""
    kind, low, high = rule.kind, rule.low, rule.high
    if kind == "seconds":
        if low is not None:
            return f"seconds, {low:g} to {high:g}"
        return f"seconds, more than 0{f' and at most {high:g}' if high is not None else ''}"
    if kind == "seconds_or_zero":
        return "seconds, 0 or more"
    if kind == "seconds_or_none":
        return f"`None` (no limit), or seconds, more than 0 and at most {high:g}"
    if kind == "whole_or_none":
        return f"`None` (no limit), or a whole number {low}..{high}"
    if kind == "whole":
        if rule.must:
            return rule.must
        return f"a whole number {low}..{high}" if high is not None else f"a whole number >= {low}"
    if kind == "flag":
        return "`True` or `False`"
    if kind == "modules":
        return "a list of module names"
    if kind == "text":
        return rule.must or "a string"
    if kind == "choice":
        return " or ".join(f"`{c!r}`" for c in rule.choices)
    if kind == "jobs":
        return "a dict: job id -> dict of options"
    if kind == "types":
        from runnerq_django.activities import options

        keys = ", ".join(f"`{name}`" for name in options.at(options.TYPES))
        return f"a dict: activity type -> dict of its `@activity` options: {keys}"
    if kind == "database":
        return "an alias of `DATABASES` (PostgreSQL)"
    if kind == "replica":
        return "`None`, or another alias of `DATABASES` (PostgreSQL): a streaming replica of `DATABASE`"
    if kind == "queue":
        return "a queue name: 1-48 of `[A-Za-z_][A-Za-z0-9_]*`"
    if kind == "queues":
        return "a non-empty list of queue names"
    if kind == "queue_databases":
        return "a dict: queue name -> an alias of `DATABASES` (PostgreSQL)"
    raise ValueError(f"no wording for the setting kind {kind!r} of {rule.key}")


def settings_reference() -> str:
    from runnerq_django.conf import RULES

    out: list[str] = []

    def table(path: str, rule) -> None:
        out.append(f"### `{path}` {{ #{anchor(path)} }}\n\n{_cell(rule.help)}\n")
        out.append("| key | default | allowed | what it does |")
        out.append("|---|---|---|---|")
        nested = []
        for r in rule.rules:
            if r.kind == "table":
                nested.append(r)
                out.append(f"| `{r.key}` | see [below](#{anchor(path, r.key)}) | a dict | {_cell(r.help)} |")
            else:
                out.append(f"| `{r.key}` | {_code(r.default)} | {_cell(allowed(r))} | {_cell(r.help)} |")
        out.append("")
        for r in nested:
            table(f"{path}['{r.key}']", r)

    table("RUNNERQ", RULES)
    return "\n".join(out)


def anchor(path: str, key: str = "") -> str:
    """The explicit id of a table's heading: ``RUNNERQ['RETENTION']`` -> ``runnerq-retention``."""
    return "-".join(re.findall(r"[a-z0-9]+", f"{path} {key}".lower().replace("_", "-"))).replace("--", "-")


# --- commands -------------------------------------------------------------------------------------


def command_names() -> list[str]:
    import runnerq_django.management.commands as package

    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_"))


def command_parser(name: str) -> argparse.ArgumentParser:
    from django.core.management import load_command_class

    return load_command_class("runnerq_django", name).create_parser("manage.py", name)


def _option_names(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    return ", ".join(f"`{o}`" for o in action.option_strings)


def _takes(action: argparse.Action, formatter: argparse.HelpFormatter) -> str:
    if action.option_strings and action.nargs == 0:
        return ""
    default_metavar = action.dest.upper() if action.option_strings else action.dest
    return formatter._format_args(action, default_metavar)


def _expand(action: argparse.Action, formatter: argparse.HelpFormatter) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    return formatter._expand_help(action)


def _parser_section(parser: argparse.ArgumentParser, level: int, title: str) -> list[str]:
    # The page's code blocks are about 88 characters wide; argparse wraps the usage to fit.
    formatter = parser.formatter_class(prog=parser.prog, width=88)
    own = [a for a in parser._actions if not set(a.option_strings) & DJANGO_COMMON]
    usage = formatter._format_usage(parser.usage, own, parser._mutually_exclusive_groups, "")
    out = [f"{'#' * level} {title}\n"]
    if parser.description:
        out.append(_cell(parser.description) + "\n")
    out.append("```text\n" + usage.strip() + " [common options]\n```\n")
    rows = []
    subparsers = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            subparsers.append(action)
            continue
        if action.help == argparse.SUPPRESS or set(action.option_strings) & DJANGO_COMMON:
            continue
        takes = _takes(action, formatter)
        default = ""
        help_text = _expand(action, formatter)
        if (
            action.option_strings
            and action.nargs != 0  # a flag's default is its absence
            and action.default not in (None, False, argparse.SUPPRESS, [])
            and "default" not in help_text
        ):
            default = f" (default: `{action.default}`)"
        # Without a metavar, argparse already shows the choices as {a,b} in "takes".
        choices = (
            f" One of {', '.join(f'`{c}`' for c in action.choices)}."
            if action.choices and action.metavar is not None
            else ""
        )
        # runnerq_django.management.base.bounded() names its parser by the bounds it enforces.
        bounds = getattr(action.type, "__name__", "")
        takes_cell = f"`{takes}`" if takes else ""
        if re.match(r"a (whole )?number ", bounds):
            takes_cell += f" ({bounds})"
        rows.append(f"| {_option_names(action)} | {takes_cell} | {_cell(help_text)}{choices}{default} |")
    if rows:
        out += ["| argument | takes | what it does |", "|---|---|---|", *rows, ""]
    for action in subparsers:
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        for sub_name, sub in action.choices.items():
            if not sub.description and helps.get(sub_name):
                sub.description = helps[sub_name]
            out += _parser_section(sub, level + 1, f"`{title.strip('`')} {sub_name}`")
    return out


def commands_reference() -> str:
    setup_django()
    out = []
    for name in command_names():
        parser = command_parser(name)
        out += _parser_section(parser, 2, f"`{name}`")
    return "\n".join(out)


# --- statuses and events -------------------------------------------------------------------------


def statuses_reference() -> str:
    from runnerq_django.spec import statuses

    missing = set(statuses.STORED_STATUSES) - set(STATUS_MEANINGS)
    stale = set(STATUS_MEANINGS) - set(statuses.STORED_STATUSES)
    if missing or stale:
        raise ValueError(
            f"docs/hooks/reference.py STATUS_MEANINGS: add {sorted(missing)}, drop {sorted(stale)}"
        )
    out = ["| status | runnable | terminal | what it means |", "|---|---|---|---|"]
    for status in statuses.STORED_STATUSES:
        runnable = "yes, once due" if status in statuses.RUNNABLE else ""
        terminal = "yes" if statuses.is_terminal(status) else ""
        out.append(f"| `{status}` | {runnable} | {terminal} | {STATUS_MEANINGS[status]} |")
    return "\n".join(out) + "\n"


def events_reference() -> str:
    import json
    from pathlib import Path

    import runnerq_django

    path = Path(runnerq_django.__file__).parent / "spec/data/schema/postgres/events.schema.json"
    schema = json.loads(path.read_text(encoding="utf-8"))
    out = [_cell(schema["description"]) + "\n"]
    for name, event in schema["$defs"].items():
        out.append(f"### `{name}`\n\n{_cell(event.get('description', ''))}\n")
        properties = event.get("properties", {})
        if not properties:
            out.append("No detail fields.\n")
            continue
        required = set(event.get("required", ()))
        out += ["| field | type | required | what it holds |", "|---|---|---|---|"]
        for field, spec in properties.items():
            kind = spec.get("type", "any")
            if "enum" in spec:
                kind = " or ".join(f"`{v}`" for v in spec["enum"])
            elif spec.get("format"):
                kind = f"{kind} ({spec['format']})"
            out.append(
                f"| `{field}` | {_cell(str(kind)) if 'enum' not in spec else kind} | "
                f"{'yes' if field in required else ''} | {_cell(spec.get('description', ''))} |"
            )
        out.append("")
    return "\n".join(out)


# --- activity options -----------------------------------------------------------------------------


def option_takes(option) -> str:
    """What a value of ``option`` is, with the bounds its check enforces."""
    allowed = option.allowed()
    return f"{option.takes}: {allowed}" if allowed else option.takes


def option_default(option) -> str:
    return _cell(option.default_words) if option.default_words else _code(option.default)


def options_reference() -> str:
    from runnerq_django.activities import options

    heads = [f"`{place}`" for place in options.PLACES]
    out = [
        f"| option | takes | default | {' | '.join(heads)} | what it does |",
        "|---" * (len(heads) + 4) + "|",
    ]
    for option in options.OPTIONS.values():
        marks = [
            (f"`{option.backend_key}`" if place == options.TASKS_BACKEND else "yes")
            if place in option.places
            else ""
            for place in options.PLACES
        ]
        out.append(
            f"| `{option.name}` | {_cell(option_takes(option))} | {option_default(option)} | "
            f"{' | '.join(marks)} | {_cell(option.help)} |"
        )
    return "\n".join(out) + "\n"


# --- the hook -------------------------------------------------------------------------------------


def on_page_markdown(markdown: str, page, config, files) -> str:
    if SETTINGS_MARKER in markdown:
        markdown = markdown.replace(SETTINGS_MARKER, settings_reference())
    if COMMANDS_MARKER in markdown:
        markdown = markdown.replace(COMMANDS_MARKER, commands_reference())
    if STATUSES_MARKER in markdown:
        markdown = markdown.replace(STATUSES_MARKER, statuses_reference())
    if EVENTS_MARKER in markdown:
        markdown = markdown.replace(EVENTS_MARKER, events_reference())
    if OPTIONS_MARKER in markdown:
        markdown = markdown.replace(OPTIONS_MARKER, options_reference())
    return markdown


# Docstrings are prose with reST-style roles (":class:`Park`"); the API pages render them as
# plain Markdown, where the role would show as text. Keep the code span, drop the role.
_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|exc|attr|mod|data|obj|const):(?=<code>)")


def on_page_content(html: str, page, config, files) -> str:
    return _ROLE.sub("", html)

"""Keyword-argument handlers: ``send_email.enqueue(to=..., subject=...)`` stores the JSON object of
the arguments, checked against the handler's signature, and a worker calls the handler with them
as keyword arguments. Single-payload handlers keep their ``enqueue(payload, **options)``."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from runnerq_django import enqueue, get_handle
from runnerq_django.storage import submit
from runnerq_django.storage.errors import InvalidArgument
from runnerq_django.storage.types import NewActivity
from runnerq_django.testing import run_until_idle
from tests.client import keyword_handlers as kw
from tests.helpers import manage, manage_env
from tests.worker.support import fetch, row_of

pytestmark = pytest.mark.django_db(transaction=True)


def stored_payload(activity_id):
    return json.loads(fetch("SELECT payload FROM runnerq_inputs WHERE activity_id = %s", [activity_id])[0][0])


def activity_count() -> int:
    return fetch("SELECT count(*) FROM runnerq_activities")[0][0]


def outcome(handle) -> str:
    return row_of(handle.id)["status"]


# the stored payload ---------------------------------------------------------------------------------


def test_keyword_arguments_are_stored_as_a_json_object_another_sdk_reads():
    handle = kw.send_email.enqueue(to="a@example.com", subject="Hi")
    assert stored_payload(handle.id) == {"to": "a@example.com", "subject": "Hi"}  # defaults not stored
    assert row_of(handle.id)["activity_type"] == "kw.send_email"


def test_positional_arguments_bind_to_the_handlers_parameter_names():
    handle = kw.send_email.enqueue("b@example.com", "Yo", cc=["c@example.com"])
    assert stored_payload(handle.id) == {"to": "b@example.com", "subject": "Yo", "cc": ["c@example.com"]}


def test_a_keyword_handler_runs_with_its_arguments_under_the_in_process_worker():
    mail = kw.send_email.enqueue(to="a@example.com", subject="Hi")
    scaled = kw.scale.enqueue(n=3)  # async def, keyword-only, a default
    rest = kw.anything.enqueue(first="x", second=2, third=[3])  # **rest takes the others
    ran = run_until_idle()
    assert {r.id: r.outcome for r in ran} == {
        mail.id: "completed",
        scaled.id: "completed",
        rest.id: "completed",
    }
    assert mail.result(timeout=0) == {"to": "a@example.com", "subject": "Hi", "cc": None, "attempt": 1}
    assert scaled.result(timeout=0) == 6.0
    assert rest.result(timeout=0) == {"first": "x", "rest": {"second": 2, "third": [3]}}


def test_a_child_spawned_with_a_dict_of_arguments_runs_as_keywords():
    handle = kw.parent.enqueue(to="kid@example.com")
    run_until_idle()
    assert handle.result(timeout=0) == {
        "to": "kid@example.com",
        "subject": "from the parent",
        "cc": None,
        "attempt": 1,
    }


def test_enqueue_many_takes_one_dict_of_arguments_per_activity():
    handles = kw.scale.enqueue_many([{"n": 1}, {"n": 2, "factor": 0.5}])
    assert [stored_payload(h.id) for h in handles] == [{"n": 1}, {"n": 2, "factor": 0.5}]
    run_until_idle()
    assert [h.result(timeout=0) for h in handles] == [2.0, 1.0]
    with pytest.raises(InvalidArgument) as raised:
        kw.scale.enqueue_many([{"n": 1}, {"m": 2}])
    assert raised.value.field == "payload['m']"


def test_the_payload_form_and_the_type_name_are_checked_the_same_way():
    by_object = enqueue(kw.send_email, {"to": "a@example.com", "subject": "Hi"})
    by_name = enqueue("kw.send_email", {"to": "a@example.com", "subject": "Hi"})
    assert (
        stored_payload(by_object.id) == stored_payload(by_name.id) == {"to": "a@example.com", "subject": "Hi"}
    )
    before = activity_count()
    for target in (kw.send_email, "kw.send_email"):
        with pytest.raises(InvalidArgument) as raised:
            enqueue(target, {"to": "a@example.com"})
        assert raised.value.field == "payload['subject']"
        with pytest.raises(InvalidArgument) as raised:
            enqueue(target, ["a@example.com", "Hi"])
        assert raised.value.field == "payload" and "must be a JSON object" in raised.value.message
    assert activity_count() == before


# refused at enqueue ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, field, words",
    [
        (
            lambda: kw.send_email.enqueue(to="a@example.com"),
            "payload['subject']",
            "missing the argument(s) 'subject'",
        ),
        (lambda: kw.send_email.enqueue(), "payload['to']", "missing the argument(s) 'to', 'subject'"),
        (
            lambda: kw.send_email.enqueue(to="a", subject="b", bcc="c"),
            "payload['bcc']",
            "takes no argument 'bcc'",
        ),
        (lambda: kw.send_email.enqueue(to=1, subject="b"), "payload['to']", "must be str (the annotation of"),
        (
            lambda: kw.send_email.enqueue(to="a", subject="b", cc=["x", 2]),
            "payload['cc']",
            "must be list[str] | None",
        ),
        (lambda: kw.anything.enqueue(first="x", ctx=1), "payload['ctx']", "it is the context"),
        (lambda: kw.scale.enqueue(n=True), "payload['n']", "must be int"),  # a bool is not an int in JSON
        (lambda: kw.scale.enqueue(n="3"), "payload['n']", "got str"),
        (lambda: kw.level.enqueue(level="medium"), "payload['level']", "must be Literal['low', 'high']"),
        (lambda: kw.send_email.enqueue("a", "b", [], "extra"), "payload", "takes 3 positional argument(s)"),
        (
            lambda: kw.send_email.enqueue("a", to="b", subject="c"),
            "payload['to']",
            "both positionally and by keyword",
        ),
        (
            lambda: kw.level.enqueue(level="low", when=datetime.now(UTC)),
            "payload['when']",
            "datetime is not JSON-serializable (json-v1)",
        ),
    ],
)
def test_bad_arguments_are_refused_at_enqueue_naming_them_and_nothing_is_written(call, field, words):
    before = activity_count()
    with pytest.raises(InvalidArgument) as raised:
        call()
    assert raised.value.field == field, raised.value
    assert words in str(raised.value)
    assert str(raised.value).startswith(field + ":")
    assert activity_count() == before


def test_a_float_parameter_takes_an_int_and_an_any_one_takes_any_json():
    assert stored_payload(kw.scale.enqueue(n=2, factor=3).id) == {"n": 2, "factor": 3}
    assert stored_payload(kw.level.enqueue(level="high", when={"at": [1, "2"]}).id)["when"] == {
        "at": [1, "2"]
    }


def test_an_enqueue_option_given_to_a_keyword_handler_says_where_options_go():
    with pytest.raises(InvalidArgument) as raised:
        kw.send_email.enqueue(to="a", subject="b", delay=60)
    assert raised.value.field == "payload['delay']"
    assert ".using(delay=...).enqueue(...)" in raised.value.message


# options -------------------------------------------------------------------------------------------


def test_using_sets_enqueue_options_for_a_keyword_handler():
    handle = kw.send_email.using(queue="mail", delay=3600, priority=4, metadata={"t": "1"}).enqueue(
        to="a@example.com", subject="Hi"
    )
    row = row_of(handle.id)
    assert handle.queue == row["queue_name"] == "mail"
    assert row["status"] == "scheduled" and row["priority"] == 4
    assert stored_payload(handle.id) == {"to": "a@example.com", "subject": "Hi"}
    chained = kw.send_email.using(queue="mail").using(idempotency_key="once")
    first = chained.enqueue(to="a", subject="b")
    again = chained.enqueue(to="a", subject="b")
    assert first.id == again.id and first.created and not again.created


def test_parameters_named_like_options_are_the_handlers_own():
    handle = kw.queue_param.using(queue="other").enqueue(queue="named", delay=5)
    assert handle.queue == "other" and row_of(handle.id)["status"] == "pending"  # delay=5 is an argument
    run_until_idle(queues=["other"])
    assert handle.result(timeout=0) == "named:5"


def test_using_refuses_what_is_not_an_enqueue_option():
    with pytest.raises(InvalidArgument) as raised:
        kw.send_email.using(subject="Hi")
    assert raised.value.field == "subject" and "is not an enqueue option" in raised.value.message
    with pytest.raises(InvalidArgument) as raised:
        enqueue(kw.single, {}, quue="typo")
    assert raised.value.field == "quue"


def test_bad_option_values_are_refused_when_enqueued():
    with pytest.raises(InvalidArgument) as raised:
        kw.send_email.using(priority=9).enqueue(to="a", subject="b")
    assert raised.value.field == "priority"


# single-payload handlers keep working ---------------------------------------------------------------


def test_a_single_payload_handler_receives_a_dict_payload_whole():
    handle = kw.single.enqueue({"to": "a", "anything": [1]}, queue="default", priority=3)
    also = kw.single.using(priority=1).enqueue({"n": 1})
    by_keyword = kw.single.enqueue(payload={"k": "v"})
    assert stored_payload(handle.id) == {"to": "a", "anything": [1]}
    assert row_of(handle.id)["priority"] == 3 and row_of(also.id)["priority"] == 1
    run_until_idle()
    assert handle.result(timeout=0) == {"got": {"to": "a", "anything": [1]}}
    assert by_keyword.result(timeout=0) == {"got": {"k": "v"}}
    with pytest.raises(InvalidArgument) as raised:
        kw.single.enqueue({"a": 1}, {"b": 2})
    assert raised.value.field == "payload" and "takes one payload" in raised.value.message


def test_a_single_payload_error_names_the_json_path():
    with pytest.raises(InvalidArgument) as raised:
        kw.single.enqueue({"items": [1, {"when": datetime.now(UTC)}]})
    assert str(raised.value) == (
        "payload['items'][1]['when']: datetime is not JSON-serializable (json-v1); "
        "send value.isoformat() (datetime.fromisoformat() reads it back)"
    )
    with pytest.raises(InvalidArgument) as raised:
        kw.single.enqueue({"ratio": float("inf")})
    assert raised.value.field == "payload['ratio']" and "no NaN or Infinity" in raised.value.message


# a payload another SDK wrote -------------------------------------------------------------------------


def test_a_stored_payload_that_does_not_fit_the_handler_fails_without_retries():
    """Enqueue checks every Python producer; a row another SDK wrote is checked by the worker,
    which fails it non-retryably (a retry would read the same payload)."""
    wrong = [
        submit(
            "default",
            NewActivity(activity_type="kw.send_email", payload=payload, id=uuid.uuid4(), max_retries=3),
        )
        for payload in ({"to": "a"}, ["a", "b"], {"to": "a", "subject": "b", "bcc": "c"})
    ]
    ran = run_until_idle()
    assert sorted((r.id, r.attempt, r.outcome) for r in ran) == sorted((w.id, 1, "failed") for w in wrong)
    errors = [json.dumps(get_handle(w.id).stored_result().data) for w in wrong]
    assert "missing the argument(s) 'subject'" in errors[0]
    assert "takes keyword arguments, but the payload is a list" in errors[1]
    assert "takes no argument 'bcc'" in errors[2]


# a real worker process --------------------------------------------------------------------------------


@pytest.mark.slow
def test_runworker_runs_keyword_handlers(live_db_url):
    mail = kw.send_email.using(queue="kwq").enqueue(to="a@example.com", subject="Hi", cc=["b@example.com"])
    scaled = kw.scale.using(queue="kwq").enqueue(n=4, factor=0.25)
    result = manage(
        "runworker",
        "--import",
        "tests.client.keyword_handlers",
        "--queue",
        "kwq",
        "--until-idle",
        check=False,
        timeout=90,
        env=manage_env(live_db_url, RUNNERQ_EXAMPLES="0"),
    )
    assert result.returncode == 0, result.stderr
    assert mail.result(timeout=1) == {
        "to": "a@example.com",
        "subject": "Hi",
        "cc": ["b@example.com"],
        "attempt": 1,
    }
    assert scaled.result(timeout=1) == 1.0


@pytest.mark.parametrize(
    "value, fix",
    [
        (
            datetime(2030, 1, 7, tzinfo=UTC),
            "; send value.isoformat() (datetime.fromisoformat() reads it back)",
        ),
        (uuid.UUID(int=1), "; send str(value) (uuid.UUID() reads it back)"),
        (Decimal("1.10"), "; send str(value) (Decimal() reads it back exactly)"),
        ({1, 2}, "; send a list: sorted(value) or list(value)"),
        (timedelta(seconds=5), "; send value.total_seconds()"),
        (object(), ""),  # nothing usual to say
    ],
)
def test_a_payload_error_says_what_to_send_instead(value, fix):
    with pytest.raises(InvalidArgument) as raised:
        kw.single.enqueue({"items": [value]})
    assert raised.value.field == "payload['items'][0]"
    assert raised.value.message.endswith(f": {type(value).__name__} is not JSON-serializable (json-v1){fix}")

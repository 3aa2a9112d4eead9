"""The storage layer as an object: ``Storage(StorageConfig)`` satisfies ``StorageOperations``,
behaves per its own config beside another one in the same process, and the module-level
operations follow the settings (``override_settings`` included)."""

from __future__ import annotations

import inspect
import threading
from dataclasses import fields, replace

import pytest
from django.conf import settings
from django.db.utils import ConnectionDoesNotExist
from django.test import override_settings

from runnerq_django import conf, storage
from runnerq_django.storage import config, errors
from runnerq_django.storage.store import Storage, StorageConfig, StorageOperations, default
from runnerq_django.storage.types import NewActivity
from tests.storage.support import row


def _protocol_methods() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(StorageOperations).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }


def test_storage_has_every_operation_of_the_protocol_with_its_parameters():
    """mypy checks this statically (``store.default`` returns a Storage as the protocol); the tests
    are not type-checked, so the same promise is kept here: each method takes the protocol's
    parameters, of the same kind and with the same default."""
    protocol = _protocol_methods()
    assert len(protocol) > 50
    instance = Storage()
    for name, wanted in protocol.items():
        got = inspect.signature(getattr(instance, name)).parameters
        for param in list(wanted.parameters.values())[1:]:  # without self
            assert param.name in got, f"Storage.{name} lacks {param.name}"
            assert got[param.name].kind == param.kind, f"Storage.{name}({param.name}): kind"
            assert got[param.name].default == param.default, f"Storage.{name}({param.name}): default"


def test_every_module_operation_is_on_the_storage():
    """``storage.<op>`` (the default storage's operations) and ``Storage.<op>`` are one list."""
    assert set(storage.operations.__all__) <= set(_protocol_methods())


def test_two_storages_with_different_payload_limits_in_one_process(store: StorageOperations, queue):
    small = Storage(replace(conf.storage_settings(), max_payload_bytes=64))
    payload = {"text": "x" * 100}
    with pytest.raises(errors.InvalidArgument) as refused:
        small.submit(queue, NewActivity("T", payload=payload))
    assert refused.value.field == "payload" and "64" in str(refused.value)
    accepted = NewActivity("T", payload=payload)
    assert store.submit(queue, accepted).created
    assert row(accepted.id)["status"] == "pending"
    # Each keeps its own limit afterwards, in either order.
    with pytest.raises(errors.InvalidArgument):
        small.submit(queue, NewActivity("T", payload=payload))
    assert store.submit(queue, NewActivity("T", payload=payload)).created


def test_two_storages_with_different_json_depths(store: StorageOperations, queue):
    shallow = Storage(replace(conf.storage_settings(), max_json_depth=2))
    nested = {"a": {"b": {"c": 1}}}
    with pytest.raises(errors.InvalidArgument, match="nested at most 2"):
        shallow.submit(queue, NewActivity("T", payload=nested))
    assert store.submit(queue, NewActivity("T", payload=nested)).created


def test_two_storages_with_different_aliases(store: StorageOperations, queue):
    """A storage runs on its own alias: one naming an alias that does not exist fails on it, the
    other (and the default storage) go on working."""
    elsewhere = Storage(replace(conf.storage_settings(), alias="runnerq_elsewhere"))
    with pytest.raises(ConnectionDoesNotExist, match="runnerq_elsewhere"):
        elsewhere.submit(queue, NewActivity("T"))
    assert store.submit(queue, NewActivity("T")).created
    assert storage.submit(queue, NewActivity("T")).created
    # using= still overrides the storage's alias, as it does for the module functions.
    assert elsewhere.submit(queue, NewActivity("T"), using=conf.database_alias()).created


def test_a_storage_config_is_per_thread(queue, storage_db):
    """The config a Storage call binds is its own thread's: a thread on a small limit and one on
    the default, in lock step, each keep theirs."""
    small = Storage(replace(conf.storage_settings(), max_payload_bytes=64))
    big = Storage(conf.storage_settings())
    payload = {"text": "x" * 100}
    outcomes: dict[str, list[str]] = {"small": [], "big": []}
    barrier = threading.Barrier(2)

    def run(name: str, target: Storage) -> None:
        from django.db import connections

        try:
            for _ in range(20):
                barrier.wait()
                try:
                    target.submit(queue, NewActivity("T", payload=payload))
                    outcomes[name].append("ok")
                except errors.InvalidArgument:
                    outcomes[name].append("refused")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=args) for args in (("small", small), ("big", big))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes == {"small": ["refused"] * 20, "big": ["ok"] * 20}
    assert config.active() is config.default()  # nothing stays bound outside a call


def test_module_operations_follow_override_settings(queue, storage_db):
    payload = {"text": "x" * 100}
    with override_settings(RUNNERQ={"MAX_PAYLOAD_BYTES": 64}):
        assert config.default().max_payload_bytes == 64
        with pytest.raises(errors.InvalidArgument, match="64"):
            storage.submit(queue, NewActivity("T", payload=payload))
    assert config.default().max_payload_bytes == conf.storage_settings().max_payload_bytes
    assert storage.submit(queue, NewActivity("T", payload=payload)).created


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_default_storage_is_rebuilt_when_settings_change():
    before = default()
    assert default() is before  # built once
    with override_settings(RUNNERQ={"MAX_JSON_DEPTH": 3}):
        during = default()
        assert during is not before and isinstance(during, Storage) and during.config.max_json_depth == 3
    assert default() is not during
    with override_settings(DATABASES={**settings.DATABASES}):
        assert default() is not during  # DATABASES changes reset it too


def test_storage_config_defaults_are_the_settings_defaults():
    """StorageConfig() (a storage built by hand) and RUNNERQ's defaults can't drift apart."""
    with override_settings(RUNNERQ={}):
        assert conf.storage_settings() == StorageConfig()
        for field in fields(StorageConfig):
            assert getattr(StorageConfig(), field.name) is not None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"alias": ""}, "StorageConfig.alias"),
        ({"max_payload_bytes": 0}, "StorageConfig.max_payload_bytes must be a whole number >= 1"),
        ({"max_json_depth": True}, "StorageConfig.max_json_depth"),
        ({"superjson": "fancy"}, "StorageConfig.superjson must be one of"),
    ],
)
def test_storage_config_refuses_values_no_operation_could_use(changes, message):
    with pytest.raises(ValueError, match=message):
        StorageConfig(**changes)

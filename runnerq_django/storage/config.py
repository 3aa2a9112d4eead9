"""What the storage layer is told from above: its settings, as one frozen value.

The storage layer reads no settings itself (it imports nothing from ``conf`` or any layer above
it). A :class:`StorageConfig` carries everything it needs; a ``Storage`` object
(``storage/store.py``) is built once from one. Layers above install where the default one comes
from (``conf`` installs a source that reads ``settings.RUNNERQ``, and resets it when
``RUNNERQ`` or ``DATABASES`` change), and the module-level operations (``storage.submit(...)``)
run with that default.

How a config reaches an operation: a ``Storage`` method binds its config for the length of the
call (a context variable, so threads and asyncio tasks each see their own), and the operations
read :func:`active`, which is that bound config or, outside any ``Storage`` call, the default's.
An operation that calls another (a periodic occurrence submitting its activity) therefore stays
on the storage it was called through.

Internal: not part of the public API.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass

SUPERJSON_MODES = ("plain", "typed")


@dataclass(frozen=True)
class StorageConfig:
    """The storage layer's settings (the ``RUNNERQ`` key each comes from, when built by ``conf``).

    There is no clock here on purpose: every time the storage layer stores or compares is the
    database's ``now()``, the one clock the whole fleet (and the other SDKs) shares."""

    alias: str = "default"  # DATABASE: the Django connection every operation runs on
    max_payload_bytes: int = 1024 * 1024  # MAX_PAYLOAD_BYTES: JSON text of a payload or metadata
    max_result_bytes: int = 1024 * 1024  # MAX_RESULT_BYTES: JSON text of an activity's result
    max_json_depth: int = 64  # MAX_JSON_DEPTH: arrays/objects nesting of a stored value
    allow_unsafe_integers: bool = False  # ALLOW_UNSAFE_INTEGERS: json-v1 numbers past 2**53 - 1
    superjson: str = "plain"  # SUPERJSON: how a claimed superjson-v1 input is decoded
    prepared_statements: bool = True  # PREPARED_STATEMENTS: off behind PgBouncer < 1.21

    def __post_init__(self) -> None:
        # conf's rules judge the settings (with the key's name); this catches a config built by
        # hand with a value no operation could use.
        if not isinstance(self.alias, str) or not self.alias:
            raise ValueError(f"StorageConfig.alias must be a database alias, got {self.alias!r}")
        for name in ("max_payload_bytes", "max_result_bytes", "max_json_depth"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"StorageConfig.{name} must be a whole number >= 1, got {value!r}")
        if self.superjson not in SUPERJSON_MODES:
            raise ValueError(
                f"StorageConfig.superjson must be one of {SUPERJSON_MODES}, got {self.superjson!r}"
            )


_bound: ContextVar[StorageConfig | None] = ContextVar("runnerq_storage_config", default=None)
_source: Callable[[], StorageConfig] = StorageConfig
_default: StorageConfig | None = None


def install(source: Callable[[], StorageConfig]) -> None:
    """Where the default config comes from (``conf`` installs one reading ``settings.RUNNERQ``);
    it is called on first use, and again after :func:`reset`."""
    global _source, _default
    _source = source
    _default = None


def reset() -> None:
    """Forget the default config: the next operation asks the source again (settings changed)."""
    global _default
    _default = None


def default() -> StorageConfig:
    """The config of the module-level operations."""
    global _default
    config = _default
    if config is None:
        config = _default = _source()
    return config


def active() -> StorageConfig:
    """The config of the ``Storage`` whose method is running, else the default one."""
    bound = _bound.get()
    if bound is not None:
        return bound
    return _default or default()  # default() inlined but for its first call: one per operation


def bind(config: StorageConfig) -> Token[StorageConfig | None]:
    """Make ``config`` the active one until :func:`unbind` with the token returned."""
    return _bound.set(config)


def unbind(token: Token[StorageConfig | None]) -> None:
    _bound.reset(token)

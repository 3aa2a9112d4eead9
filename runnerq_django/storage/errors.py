"""Storage errors, typed by the spec's ``storage_error_kind`` (numbers frozen by the spec)."""

from __future__ import annotations

from enum import IntEnum

from runnerq_django.exceptions import RunnerQError

__all__ = [
    "BY_KIND",
    "MIGRATE_HINT",
    "CheckpointConflict",
    "ClaimLost",
    "ConfigurationError",
    "Conflict",
    "DuplicateActivity",
    "ErrorKind",
    "IdempotencyConflict",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "SchemaMissing",
    "SerializationError",
    "StorageError",
    "Timeout",
    "Unavailable",
    "Unsupported",
]


class ErrorKind(IntEnum):
    UNAVAILABLE = 0
    CONFLICT = 1
    NOT_FOUND = 2
    INTERNAL = 3
    SERIALIZATION = 4
    CONFIGURATION = 5
    TIMEOUT = 6
    DUPLICATE_ACTIVITY = 7
    IDEMPOTENCY_CONFLICT = 8
    CLAIM_LOST = 9
    CHECKPOINT_CONFLICT = 10
    INVALID_ARGUMENT = 11
    UNSUPPORTED = 12

    @property
    def wire_name(self) -> str:
        """The kind's name on the wire (conformance driver, storage protocol)."""
        return self.name.lower()


class StorageError(RunnerQError):
    """A storage operation refused or failed; ``kind`` says how, ``field`` names a bad argument."""

    kind: ErrorKind = ErrorKind.INTERNAL

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field


# One class per kind, direct subclasses of StorageError (BY_KIND below relies on that).


class Unavailable(StorageError):
    """The database could not be reached."""

    kind = ErrorKind.UNAVAILABLE


class Conflict(StorageError):
    """The operation conflicts with the activity's current state."""

    kind = ErrorKind.CONFLICT


class NotFound(StorageError):
    """No such activity, key or result."""

    kind = ErrorKind.NOT_FOUND


class Internal(StorageError):
    """An unexpected storage failure."""

    kind = ErrorKind.INTERNAL


class SerializationError(StorageError):
    """A payload or value is not serializable as json-v1."""

    kind = ErrorKind.SERIALIZATION


class ConfigurationError(StorageError):
    """The schema or settings are not usable."""

    kind = ErrorKind.CONFIGURATION


class Timeout(StorageError):
    """The operation did not finish in time."""

    kind = ErrorKind.TIMEOUT


class DuplicateActivity(StorageError):
    """The idempotency key is taken (no_reuse)."""

    kind = ErrorKind.DUPLICATE_ACTIVITY


class IdempotencyConflict(StorageError):
    """The key's holder can still succeed."""

    kind = ErrorKind.IDEMPOTENCY_CONFLICT


class ClaimLost(StorageError):
    """The claim token no longer owns the activity."""

    kind = ErrorKind.CLAIM_LOST


class CheckpointConflict(StorageError):
    """A different value is already stored."""

    kind = ErrorKind.CHECKPOINT_CONFLICT


class InvalidArgument(StorageError):
    """An argument is out of range; nothing was written."""

    kind = ErrorKind.INVALID_ARGUMENT


class Unsupported(StorageError):
    """The operation or serialization is not supported."""

    kind = ErrorKind.UNSUPPORTED


BY_KIND = {cls.kind: cls for cls in StorageError.__subclasses__()}

MIGRATE_HINT = 'run "python manage.py migrate" or "runworker --migrate"'


class SchemaMissing(ConfigurationError):
    """The RunnerQ tables are not in the database: its migrations were never applied."""

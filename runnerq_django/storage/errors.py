"""Storage errors, typed by the spec's ``storage_error_kind`` (numbers frozen by the spec)."""

from __future__ import annotations

from enum import IntEnum


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


class StorageError(Exception):
    """A storage operation refused or failed; ``kind`` says how, ``field`` names a bad argument."""

    kind: ErrorKind = ErrorKind.INTERNAL

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field


def _kind(kind: ErrorKind, doc: str):
    return type(kind.name.title().replace("_", ""), (StorageError,), {"kind": kind, "__doc__": doc})


Unavailable = _kind(ErrorKind.UNAVAILABLE, "The database could not be reached.")
Conflict = _kind(ErrorKind.CONFLICT, "The operation conflicts with the activity's current state.")
NotFound = _kind(ErrorKind.NOT_FOUND, "No such activity, key or result.")
Internal = _kind(ErrorKind.INTERNAL, "An unexpected storage failure.")
SerializationError = _kind(ErrorKind.SERIALIZATION, "A payload or value is not serializable as json-v1.")
ConfigurationError = _kind(ErrorKind.CONFIGURATION, "The schema or settings are not usable.")
Timeout = _kind(ErrorKind.TIMEOUT, "The operation did not finish in time.")
DuplicateActivity = _kind(ErrorKind.DUPLICATE_ACTIVITY, "The idempotency key is taken (no_reuse).")
IdempotencyConflict = _kind(ErrorKind.IDEMPOTENCY_CONFLICT, "The key's holder can still succeed.")
ClaimLost = _kind(ErrorKind.CLAIM_LOST, "The claim token no longer owns the activity.")
CheckpointConflict = _kind(ErrorKind.CHECKPOINT_CONFLICT, "A different value is already stored.")
InvalidArgument = _kind(ErrorKind.INVALID_ARGUMENT, "An argument is out of range; nothing was written.")
Unsupported = _kind(ErrorKind.UNSUPPORTED, "The operation or serialization is not supported.")

BY_KIND = {cls.kind: cls for cls in StorageError.__subclasses__()}

MIGRATE_HINT = 'run "python manage.py migrate" or "runworker --migrate"'


class SchemaMissing(ConfigurationError):
    """The RunnerQ tables are not in the database: its migrations were never applied."""

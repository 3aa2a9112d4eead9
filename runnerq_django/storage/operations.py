"""The storage operations, one import away (``from runnerq_django.storage import operations``).

They live in small modules by subject -- ``submit`` (submit, keys), ``attempts`` (claim, leases,
success, failure, reaper), ``durable`` (checkpoints, dependencies, park, signal, reads),
``retention`` (cleanup) -- with every statement in ``sql``, argument checks in ``validation``
and connection handling and error mapping in ``db``.
"""

from runnerq_django.storage.attempts import (
    claim,
    claim_statement,
    complete,
    complete_many,
    fail,
    reap,
    reap_ids,
    release,
    renew,
    renew_many,
)
from runnerq_django.storage.durable import (
    checkpoint,
    get_result,
    get_results,
    list_checkpoints,
    park,
    register_dependencies,
    register_dependency,
    signal,
)
from runnerq_django.storage.retention import cleanup
from runnerq_django.storage.submit import lookup_key, submit, submit_many

__all__ = [
    "checkpoint",
    "claim",
    "claim_statement",
    "cleanup",
    "complete",
    "complete_many",
    "fail",
    "get_result",
    "get_results",
    "list_checkpoints",
    "lookup_key",
    "park",
    "reap",
    "reap_ids",
    "register_dependencies",
    "register_dependency",
    "release",
    "renew",
    "renew_many",
    "signal",
    "submit",
    "submit_many",
]

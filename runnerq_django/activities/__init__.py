"""Activity types: what a handler is and what may be said of it.

The registry and the ``@activity`` decorator (``registry``), the one declaration of every option
(``options``) and the checks that read it at each place an option is given (``enqueue_options``,
``type_settings``), a handler's signature (``handler_signature``), the per-type defaults read from
settings (``handled_types``), argument checks shared by every edge (``arguments``), concurrency
limits (``concurrency``), and the nouns every layer above storage names (``nouns``, the leaf).

Internal: not part of the public API, except ``registry`` and ``concurrency`` (documented in the
API reference); the names a user needs are re-exported at the package root (``from runnerq_django
import activity``). Importing this package imports none of its modules.
"""

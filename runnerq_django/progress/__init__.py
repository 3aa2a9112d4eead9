"""Progress and events out of a running activity: the handler's side (``ctx.progress()``,
``ctx.publish()``: ``writer``) and the reader's (``handle.progress()``, ``handle.events()``:
``readers``). The rows are the app's own tables, written and read through ``storage.progress``.

Internal: not part of the public API (the public names are the context's and the handle's
methods, and ``runnerq_django.progress.readers.EventStream``'s iteration).
"""

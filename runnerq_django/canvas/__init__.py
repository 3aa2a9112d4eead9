"""Canvas: chains, groups, chords, map and starmap on durable children.

A canvas is plain JSON run by one built-in activity type, ``runnerq.canvas`` (the
*orchestrator*, ``runnerq_django.canvas.orchestrator``). Its handler is an ordinary durable
handler: it spawns the members as its children and awaits them with the context's park, so a canvas survives worker crashes and
deploys like any durable workflow, shows in the admin as one tree (the orchestrator, its
members, nested orchestrators for nested canvases), and its members can be handled by workers
of any language -- a member is an activity row of its own type with a JSON payload. Only the
orchestrator itself is Python: a queue running canvases needs at least one Python worker.

Data flow. A member without a payload (``a.s()``) receives its *input*: in a chain, the
previous member's result; in a group, the group's input (a group inside a chain gets the
previous result, a top-level group ``null``); a chord's callback, the list of its group's
results. A member with a payload keeps it: ``a.s(x)`` is only allowed where no input arrives
(a chain's first member, a top-level group), ``a.si(x)`` anywhere (the input is dropped).

Failures. A failed member fails a chain with the member's error. A group (and a chord's group)
follows ``on_failure``: ``"fail_fast"`` (the default) fails it with the first failure it sees
and cancels the members still unfinished; ``"collect"`` waits for all and returns one outcome
per member, ``{"ok": true, "value": ...}`` or ``{"ok": false, "error": ..., "type": ...}``.
Cancelling the canvas (its handle) cancels every member, nested ones included (the spec's
cascading cancel). A failure is seen when the orchestrator next wakes, which is at the latest
when the member it is parked on ends.

Bounds, checked when a canvas is built (``InvalidArgument`` naming the member): every member's
payload and options as ``enqueue`` would check them (``Signature`` itself checks, however it is
built), at most ``RUNNERQ['MAX_CANVAS_MEMBERS']`` members in all (map items and nested canvases'
members included: the orchestrator spawns a group in one transaction) and at most
``MAX_NESTING`` levels of nested canvases. Each canvas knows its own member count and nesting
from its parts', so nothing walks a canvas recursively before it is known to be shallow.

Fan-out. A group's members are submitted in one fenced bulk insert (chunks of the bulk
enqueue path, one transaction) with ids derived from the orchestrator's id and the member's
position, so a replay finds them instead of submitting again. The orchestrator parks on the
*last* unfinished member and, when woken, reads every result in pages of 1,000: with members
claimed in submission order it is woken about once for the whole group (``bench/canvas.py``
measures it), not once per member.

The names are defined in ``runnerq_django.canvas.builder``; ``runnerq_django.canvas.orchestrator``
is the built-in activity type that runs a canvas (the app's ``ready()`` imports it).
"""

from __future__ import annotations

from runnerq_django.canvas.builder import (
    CANVAS_TYPE,
    COLLECT,
    FAIL_FAST,
    MAX_NESTING,
    Canvas,
    CanvasFailed,
    Chain,
    Chord,
    Group,
    Signature,
    chain,
    chord,
    group,
    map,
    signature,
    starmap,
)

__all__ = [
    "CANVAS_TYPE",
    "COLLECT",
    "FAIL_FAST",
    "MAX_NESTING",
    "Canvas",
    "CanvasFailed",
    "Chain",
    "Chord",
    "Group",
    "Signature",
    "chain",
    "chord",
    "group",
    "map",
    "signature",
    "starmap",
]

"""Griffe extension for the API pages: classes without the dunder attributes a wrapper copies
(``__name__``, ``__doc__``, ``__wrapped__`` ...) and the protocol methods every class has, which
``filters: public`` keeps and which say nothing to a reader. ``__init__`` (merged into the class
signature) and ``__call__`` stay."""

from __future__ import annotations

from typing import Any

import griffe

KEEP = {"__init__", "__call__"}


class DropDunders(griffe.Extension):
    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        for name in list(cls.members):
            if name.startswith("__") and name.endswith("__") and name not in KEEP:
                cls.del_member(name)

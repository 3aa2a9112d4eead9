"""Workers that recycle themselves: ``runworker --max-activities-per-process N`` and
``--max-memory-per-process MB`` (``RUNNERQ['MAX_ACTIVITIES_PER_PROCESS']``,
``RUNNERQ['MAX_MEMORY_PER_PROCESS_MB']``).

A process that passes either limit drains as for a stop signal (no new claims, running handlers
finish, anything still held is released, the pool rows are deleted) and exits with
``EX_TEMPFAIL`` (75); the parent of ``runworker --processes`` starts a fresh one at once. The
activity limit is a claim budget, shared by every database a process serves: the dispatchers
claim no more than what is left of it, so the process runs exactly ``N`` activities (the last
claim round takes only the remainder) and recycling never cuts into a claim. The memory limit is
the process's own resident set, read every second; a process-mode handler's child is a process
of its own, measured on its own (``worker/isolation.py``), and never counts here.

Internal: not part of the public API.
"""

from __future__ import annotations

import os
import resource
import sys
import threading

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_mb() -> float:
    """This process's resident memory in MiB: ``/proc/self/statm`` where there is one (Linux),
    else the peak (``getrusage``), which can only recycle earlier, never later."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE / 2**20
    except (OSError, IndexError, ValueError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes there, KiB here


def peak_resident_mb() -> float:
    """This process's peak resident memory since it started (for a forked child: since the fork)
    in MiB: ``VmHWM`` of ``/proc/self/status``, else ``getrusage``'s peak."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, IndexError, ValueError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


class Recycler:
    """One process's limits: the claim budget the dispatchers draw from, and the memory check.

    :meth:`take` and :meth:`give_back` are thread-safe (a process serving several databases has a
    dispatcher per database); :meth:`due` says why the process should recycle now, or None."""

    def __init__(self, max_activities: int | None, max_memory_mb: int | None):
        self.max_activities = max_activities
        self.max_memory_mb = max_memory_mb
        self._lock = threading.Lock()
        self._taken = 0  # claims granted (a grant not used is given back)
        self.reason: str | None = None  # once due: why
        self.fields: dict[str, object] = {}
        # Set when the memory limit was found below an idle process's own memory (then dropped).
        self.below_idle: dict[str, object] | None = None

    @property
    def enabled(self) -> bool:
        return self.max_activities is not None or self.max_memory_mb is not None

    def take(self, wanted: int) -> int:
        """How many of ``wanted`` claims the budget allows now (all of them without a limit)."""
        if self.max_activities is None:
            with self._lock:
                self._taken += wanted  # counted all the same (see due(): a limit below idle)
            return wanted
        with self._lock:
            granted = max(0, min(wanted, self.max_activities - self._taken))
            self._taken += granted
            return granted

    def give_back(self, unused: int) -> None:
        """Return the part of a grant the claim did not use (it found less work)."""
        if unused <= 0:
            return
        with self._lock:
            self._taken -= unused

    @property
    def claimed(self) -> int:
        return self._taken

    def due(self) -> str | None:
        """Why this process should recycle now (and remember it), or None."""
        if self.reason is not None:
            return self.reason
        if self.max_activities is not None and self._taken >= self.max_activities:
            self.reason = "max_activities"
            self.fields = {"activities": self._taken, "max_activities": self.max_activities}
        elif self.max_memory_mb is not None:
            resident = resident_mb()
            if resident > self.max_memory_mb and self._taken == 0:
                # Over the limit before running anything: a fresh process would be too, and the
                # pool would replace processes in a loop. The limit is dropped for this process
                # (the caller logs it once, as an error).
                self.below_idle = {"resident_mb": round(resident, 1), "max_memory_mb": self.max_memory_mb}
                self.max_memory_mb = None
            elif resident > self.max_memory_mb:
                self.reason = "max_memory"
                self.fields = {
                    "resident_mb": round(resident, 1),
                    "max_memory_mb": self.max_memory_mb,
                    "activities": self._taken,
                }
        return self.reason

    def sentence(self) -> str:
        """Why, in words (for the log and the stop reason)."""
        if self.reason == "max_activities":
            return f"recycling: it claimed {self.fields['activities']} activities, its limit"
        if self.reason == "max_memory":
            return (
                f"recycling: its resident memory is {self.fields['resident_mb']} MiB, over its limit of "
                f"{self.fields['max_memory_mb']} MiB"
            )
        return "recycling"

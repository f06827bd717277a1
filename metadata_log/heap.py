"""The garbage collector around big images: paused while one is encoded or decoded, and kept off what stays.

An image of 1M partitions is millions of objects. CPython's cyclic collector walks them again and again
while they are built, and every full collection walks them again once they are built; neither finds
anything, since images, records and the log window form no cycles. The collector is one per process, so
the state here is too: it is the collector's, not a cache.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["freeze_survivors", "gc_paused"]


class _Pauses:
    """How many ``gc_paused`` sections run now (on any thread), and whether collection was on before the first."""

    def __init__(self) -> None:
        # re-entrant: a finalizer run by the collection ``freeze_survivors`` holds it through may pause too
        self.lock = threading.RLock()
        self.count = 0
        self.was_enabled = False


_PAUSES = _Pauses()


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a whole image or snapshot is encoded or decoded.

    Those build or walk millions of objects, and CPython's collector runs again and again as they pile up,
    each pass longer than the last (for a big snapshot, a large part of the time decoding it takes). Nothing they
    build is a cycle to collect. Process-wide (the collector is), nestable and thread-safe: collection resumes
    when the last pause ends, if it was on before."""
    with _PAUSES.lock:
        if _PAUSES.count == 0:
            _PAUSES.was_enabled = gc.isenabled()
            gc.disable()
        _PAUSES.count += 1
    try:
        yield
    finally:
        with _PAUSES.lock:
            _PAUSES.count -= 1
            if _PAUSES.count == 0 and _PAUSES.was_enabled:
                gc.enable()


def freeze_survivors(collect: bool = True) -> bool:
    """Collect (``collect``), then move every object still alive to the collector's permanent generation.

    A node holds a big image as millions of immutable objects that every full collection walks again
    (``PartitionImage`` tuples stay tracked: CPython untracks only exact tuples): a pass that grows with the
    image, run each time the surviving objects grew by a quarter. For a big image such a pause costs a leader
    its leadership. Frozen objects are still freed by reference counting once no
    image holds them; what freezing gives up is finding *cycles* among them, and the image, its records
    and the log window form none. Skipped (False) while a ``gc_paused`` section runs on another thread:
    the collection would walk what it is building; and a section that begins meanwhile waits for the
    freeze to end (the lock is held throughout), or the freeze would take in its half-built objects."""
    with _PAUSES.lock:
        if _PAUSES.count:
            return False
        if collect:
            gc.collect()
        gc.freeze()
        return True

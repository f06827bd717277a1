"""A ``FederatedProducer``'s key-order lease (``kfed.key.order.lease.ms``, ``docs/KEY_ORDER.md`` decision 3).

A producer that no controller has answered for a while may route keys by a map that was replaced meanwhile,
and write behind the seal measured a grace after the change. So a strict topic's keyed messages wait while the
routing was last confirmed (``LogFollower.confirmed_at``) longer ago than the lease. A watchdog thread watches
the deadline and tells the producer when the lease lapses and when it holds again; the producer then makes its
routes again (a lapsed lease maps every slot of a strict topic to "wait"), so producing pays nothing per
message for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Final

from metadata_client.follower import LogFollower

log = logging.getLogger(__name__)

LAPSED_CHECK_S: Final = 0.05
"""How often a lapsed lease looks for a new confirmation."""


class RoutingLease:
    """``held``: whether a controller confirmed the producer's routing within ``lease_s`` (inf: no lease)."""

    def __init__(self, follower: LogFollower, lease_s: float, changed: Callable[[], None]) -> None:
        self.held = True
        self.lease_s = lease_s
        self._follower = follower
        self._changed = changed
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Watch the lease from now on (with the first strict topic routed); idempotent, nothing when it is off.
        The follower then long-polls for at most a third of the lease, so an idle log still confirms in time."""
        if self._thread is not None or self.lease_s == float("inf"):
            return
        self._follower.wait_ms = min(self._follower.wait_ms, max(100, int(self.lease_s * 1000 / 3)))
        self._thread = threading.Thread(target=self._watch, name="kfed-key-order-lease", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stopping.is_set():
            left = self._follower.confirmed_at + self.lease_s - time.monotonic()
            if (left > 0) != self.held:
                self.held = left > 0
                if not self.held:
                    log.warning(
                        "no controller confirmed the key routing for %.0f ms (kfed.key.order.lease.ms): "
                        "keyed messages of strict topics wait",
                        self.lease_s * 1000,
                    )
                self._changed()
            self._stopping.wait(left if self.held else LAPSED_CHECK_S)

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(1.0)

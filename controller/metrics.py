"""Prometheus text exposition for one node: a few gauges and one request-latency histogram."""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Final

LATENCY_BUCKETS_S: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class RequestLatency:
    """Histogram of request durations by (method, route template, status class)."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0] * len(LATENCY_BUCKETS_S))
        self._sum: dict[tuple[str, str, str], float] = defaultdict(float)
        self._count: dict[tuple[str, str, str], int] = defaultdict(int)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, f"{status // 100}xx")
        i = bisect.bisect_left(LATENCY_BUCKETS_S, seconds)
        if i < len(LATENCY_BUCKETS_S):
            self._buckets[key][i] += 1
        self._sum[key] += seconds
        self._count[key] += 1

    def render(self) -> list[str]:
        name = "kfed_http_request_duration_seconds"
        lines = [f"# HELP {name} HTTP request latency by route.", f"# TYPE {name} histogram"]
        for key in sorted(self._count):
            method, route, status = key
            labels = f'method="{method}",route="{route}",status="{status}"'
            cumulative = 0
            for bound, n in zip(LATENCY_BUCKETS_S, self._buckets[key], strict=True):
                cumulative += n
                lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {cumulative}')
            lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {self._count[key]}')
            lines.append(f"{name}_sum{{{labels}}} {self._sum[key]:.6f}")
            lines.append(f"{name}_count{{{labels}}} {self._count[key]}")
        return lines


def gauge(name: str, help_text: str, value: float, labels: str = "") -> list[str]:
    label_part = f"{{{labels}}}" if labels else ""
    return [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name}{label_part} {value}"]


def counter(name: str, help_text: str, value: float) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} counter", f"{name} {value}"]

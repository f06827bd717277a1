"""Tailers of benchmark 2 in their own process (started by ``bench.latency``, not by hand).

Each tailer is an asyncio task with its own connection to one node (tailer i -> ``urls[i % len]``), following
the log from ``--offset`` by long-poll (``GET /v1/log?wait_ms``) or Server-Sent Events (``/v1/log/stream``).
For every registration of ``--cluster`` with bootstrap servers ``127.0.0.1:<seq + 1>`` it notes the
wall-clock time it arrived. When every
tailer is connected the process creates ``<out>.ready``; at the end it writes ``(seq, arrival)`` pairs to
``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from .httpconn import TRANSPORT_ERRORS, Connection

POLL_WAIT_MS = 10_000


TAILERS_PER_SOURCE = 32
"""Tailers that share one loopback source address (127.0.0.2, .3, ...): spread over the three nodes, that is
at most 11 streams per address on each, under the controllers' 64 log streams per client address. From one
address, 1,000 SSE tailers would get 192 streams and 808 refusals (429)."""


def source_host(index: int) -> str:
    """The loopback address tailer ``index`` connects from, as if each group of tailers ran on its own host."""
    group = index // TAILERS_PER_SOURCE
    return f"127.0.{2 + group // 250}.{2 + group % 250}"


class Tailer:
    def __init__(self, url: str, offset: int, cluster_id: str, count: int, source: str | None = None) -> None:
        self.conn = Connection(url, source)
        self.offset = offset
        self.cluster_id = cluster_id
        self.marker = b'"cluster_id":"' + cluster_id.encode() + b'"'
        self.count = count
        self.arrivals: list[tuple[int, float]] = []
        self.seen: set[int] = set()
        self.errors: Counter[str] = Counter()

    def done(self) -> bool:
        return len(self.seen) >= self.count

    def _note(self, seq: int, at: float) -> None:
        if seq not in self.seen:
            self.seen.add(seq)
            self.arrivals.append((seq, at))

    # -- long-poll ---------------------------------------------------------------------------------
    async def connect_poll(self) -> None:
        reply = await self.conn.request("GET", f"/v1/log?offset={self.offset}&limit=1&wait_ms=0")
        if not reply.ok:
            raise RuntimeError(f"GET /v1/log: {reply.status} {reply.body[:200]!r}")

    async def run_poll(self, deadline: float) -> None:
        position = self.offset
        while not self.done() and time.time() < deadline:
            try:
                reply = await self.conn.request(
                    "GET", f"/v1/log?offset={position}&limit=1000&wait_ms={POLL_WAIT_MS}", timeout_s=30
                )
            except TRANSPORT_ERRORS as e:
                self.errors[type(e).__name__] += 1
                await asyncio.sleep(0.1)
                continue
            at = time.time()
            if not reply.ok:
                self.errors[str(reply.status)] += 1
                await asyncio.sleep(0.1)
                continue
            page = reply.json()
            for record in page["records"]:
                data = record["data"]
                if record["type"] == "ClusterRegistered" and data["cluster_id"] == self.cluster_id:
                    self._note(int(data["bootstrap_servers"].rsplit(":", 1)[1]) - 1, at)
            position = page["next_offset"]

    # -- Server-Sent Events ------------------------------------------------------------------------
    async def run_sse(self, deadline: float, connected: asyncio.Event) -> None:
        buffer = b""
        stream = self.conn.stream(f"/v1/log/stream?offset={self.offset}")
        try:
            async with asyncio.timeout(max(0.0, deadline - time.time())):
                async for chunk in stream:
                    at = time.time()
                    connected.set()  # the first chunk is the stream's "retry:" line
                    buffer += chunk
                    *events, buffer = buffer.split(b"\n\n")
                    for event in events:
                        if self.marker in event and b'"ClusterRegistered"' in event:
                            data = orjson.loads(event[event.index(b"data: ") + 6 :])["data"]
                            self._note(int(data["bootstrap_servers"].rsplit(":", 1)[1]) - 1, at)
                    if self.done():
                        return
        except TimeoutError:
            pass
        except TRANSPORT_ERRORS as e:
            self.errors[type(e).__name__] += 1
        finally:
            await stream.aclose()
            connected.set()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    urls = args.urls.split(",")
    tailers = [
        Tailer(urls[(args.first + i) % len(urls)], args.offset, args.cluster, args.count, source_host(args.first + i))
        for i in range(args.tailers)
    ]
    deadline = time.time() + args.deadline_s
    tasks: list[asyncio.Task[None]] = []
    if args.mode == "poll":
        await asyncio.gather(*(t.connect_poll() for t in tailers))
        tasks = [asyncio.create_task(t.run_poll(deadline)) for t in tailers]
    else:
        events = [asyncio.Event() for _ in tailers]
        tasks = [asyncio.create_task(t.run_sse(deadline, e)) for t, e in zip(tailers, events, strict=True)]
        await asyncio.gather(*(e.wait() for e in events))
    Path(str(args.out) + ".ready").touch()
    await asyncio.gather(*tasks)
    errors: Counter[str] = Counter()
    for t in tailers:
        errors.update(t.errors)
        await t.conn.close()
    return {
        "mode": args.mode,
        "tailers": len(tailers),
        "arrivals": [[seq, at] for t in tailers for seq, at in t.arrivals],
        "complete_tailers": sum(1 for t in tailers if t.done()),
        "errors": dict(errors),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--urls", required=True, help="comma-separated node URLs")
    p.add_argument("--first", type=int, default=0, help="index of this process's first tailer (spreads nodes)")
    p.add_argument("--mode", choices=["poll", "sse"], required=True)
    p.add_argument("--tailers", type=int, required=True)
    p.add_argument("--offset", type=int, required=True)
    p.add_argument("--cluster", required=True, help="the cluster id the writer re-registers")
    p.add_argument("--count", type=int, required=True, help="sequence numbers 0 .. count-1 to expect")
    p.add_argument("--deadline-s", type=float, required=True)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    result = asyncio.run(run(args))
    tmp = args.out.with_suffix(".tmp")
    tmp.write_bytes(orjson.dumps(result))
    tmp.rename(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One Raft voter of benchmark 1c, in its own process (started by ``bench.raft_layer``, not by hand).

``--impl kfed`` runs our ``RaftNode`` around a ``LogState`` (decode, apply, idempotency keys, the asyncio
bridge, optionally the fsynced journal); ``--impl raw`` runs a bare pysyncobj ``SyncObj`` with the same
``SyncObjConf`` (built by ``bridge.sync_obj_conf``; only the serializer hooks are pysyncobj's defaults), whose
single replicated method takes the same command bytes and only counts them. The voter that becomes
leader drives the load for each phase of ``--plan`` and writes its measurements to ``--out``; the others
serve as followers until they are stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, cast

from pysyncobj import FAIL_REASON, SyncObj, replicated

from metadata_log.records import LATEST_METADATA_VERSION, ClusterRegistered, MetadataVersionChanged, Record
from metadata_quorum import RaftNode, RaftSettings, bridge
from metadata_quorum.state import LogState, Proposal, encode_command

LEADER_WAIT_S = 30.0


def records_for(count: int, salt: int) -> tuple[Record, ...]:
    """``count`` ~70-byte records that always apply: re-registering one of 100 clusters."""
    return tuple(
        ClusterRegistered(f"cluster-{(salt + i) % 100:03d}", "region-1", f"127.0.0.1:{9000 + (salt + i) % 1000}")
        for i in range(count)
    )


def _summary(records_per_command: int, seconds: float, latencies: list[float], errors: int) -> dict[str, Any]:
    latencies.sort()
    n = len(latencies)

    def pct(p: float) -> float:
        return round(latencies[min(n - 1, max(0, int(p / 100 * n + 0.999) - 1))] * 1000, 3) if n else -1.0

    return {
        "records_per_command": records_per_command,
        "commands": n,
        "seconds": seconds,
        "commands_per_s": n / seconds,
        "records_per_s": n * records_per_command / seconds,
        "p50_ms": pct(50),
        "p99_ms": pct(99),
        "errors": errors,
    }


# -- ours ---------------------------------------------------------------------------------------------
async def kfed_phase(node: RaftNode, records_per_command: int, warmup_s: float, seconds: float, inflight: int) -> Any:
    """Keep ``inflight`` proposals of one command each in flight; measure after ``warmup_s``. Each proposal's
    future gets a done-callback, as the raw side gives pysyncobj a callback: no task per proposal."""
    loop = asyncio.get_running_loop()
    proposals = [Proposal(records_for(records_per_command, 0))]
    slots = asyncio.Semaphore(inflight)
    start = loop.time() + warmup_s
    end = start + seconds
    latencies: list[float] = []
    errors = 0

    def done(t0: float, future: asyncio.Future[Any]) -> None:
        nonlocal errors
        slots.release()
        if future.exception() is not None:  # Unavailable or OutcomeUnknown
            errors += 1
            return
        t1 = loop.time()
        if start <= t1 < end:
            latencies.append(t1 - t0)

    while loop.time() < end:
        await slots.acquire()
        node.propose(proposals).add_done_callback(functools.partial(done, loop.time()))
    # Commands still in flight are not waited for: only completions inside the window count.
    return _summary(records_per_command, seconds, list(latencies), errors)


async def drive_kfed(node: RaftNode, plan: list[tuple[int, float]], warmup_s: float, inflight: int) -> list[Any]:
    return [await kfed_phase(node, k, warmup_s, seconds, inflight) for k, seconds in plan]


# -- raw pysyncobj ------------------------------------------------------------------------------------
class RawCounter(SyncObj):  # type: ignore[misc]  # pysyncobj is untyped
    """A bare SyncObj: one replicated method that takes the command bytes and counts them."""

    def __init__(self, self_raft: str, peers: list[str], conf: Any) -> None:
        self.applied = 0
        super().__init__(self_raft, peers, conf)

    @replicated  # type: ignore[untyped-decorator]
    def apply_command(self, data: bytes) -> int:
        self.applied += 1
        return len(data)


def raw_phase(obj: RawCounter, records_per_command: int, warmup_s: float, seconds: float, inflight: int) -> Any:
    """The same load with pysyncobj's callback API (the callback runs on pysyncobj's thread)."""
    data = encode_command([Proposal(records_for(records_per_command, 0))], LATEST_METADATA_VERSION)
    slots = threading.BoundedSemaphore(inflight)
    start = time.monotonic() + warmup_s
    end = start + seconds
    latencies: list[float] = []
    errors = 0

    def done(result: Any, error: int, t0: float) -> None:
        nonlocal errors
        slots.release()
        t1 = time.monotonic()
        if error != FAIL_REASON.SUCCESS:
            errors += 1
        elif start <= t1 < end:
            latencies.append(t1 - t0)

    while time.monotonic() < end:
        if not slots.acquire(timeout=10):
            raise TimeoutError("no command completed for 10 s")
        t0 = time.monotonic()
        obj.apply_command(data, callback=lambda r, e, t0=t0: done(r, e, t0))
    # Commands still in flight are not waited for: only completions inside the window count.
    return _summary(records_per_command, seconds, list(latencies), errors)


def drive_raw(obj: RawCounter, plan: list[tuple[int, float]], warmup_s: float, inflight: int) -> list[Any]:
    return [raw_phase(obj, k, warmup_s, seconds, inflight) for k, seconds in plan]


class _NoHooks:
    """Stands in for the RaftNode whose methods ``bridge.sync_obj_conf`` wires in as hooks: every one is None,
    so pysyncobj uses its own serializer and calls no callbacks."""

    def __getattr__(self, name: str) -> None:
        return None


def raw_conf(data_dir: Path) -> Any:
    """Exactly the ``SyncObjConf`` our RaftNode uses, minus our hooks. pysyncobj's own journal, dump serializer,
    pickling and connections stay in place: a raw voter's process builds no RaftNode, so nothing installs
    the bridge (importing ``metadata_quorum`` changes nothing in pysyncobj)."""
    return bridge.sync_obj_conf(RaftSettings(), data_dir, cast(bridge.NodeHooks, _NoHooks()))


def conf_summary(conf: Any) -> dict[str, Any]:
    """The plain-valued options of a SyncObjConf (to show both sides ran with the same ones)."""
    return {k: v for k, v in sorted(vars(conf).items()) if isinstance(v, int | float | str | bool) or v is None}


class JournalCounts:
    """Counts this voter's journal appends and truncated entries (wraps the journal object's methods; no
    product code changes). Followers that rewrite entries they already hold show more appends than the
    leader."""

    def __init__(self, journal: Any) -> None:
        self.appends = 0
        self.truncated = 0
        delete_from = journal.deleteEntriesFrom

        def counted_delete_from(entry_from: int) -> Any:
            self.truncated += max(0, len(journal) - entry_from)
            return delete_from(entry_from)

        journal.deleteEntriesFrom = counted_delete_from
        # Our journal appends through add_entries (add() included; followers call it per message): count there.
        name = "add_entries" if hasattr(journal, "add_entries") else "add"
        append = getattr(journal, name)

        def counted_append(*args: Any) -> Any:
            self.appends += len(args[0]) if name == "add_entries" else 1
            return append(*args)

        setattr(journal, name, counted_append)


_running: list[Any] = []  # the SyncObj of this process, stopped first on SIGTERM


def _stop(signum: int, frame: object) -> None:
    for syncobj in _running:  # stop the Raft thread before the event loop goes away
        syncobj.destroy()
    sys.exit(0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--impl", choices=["kfed", "raw"], required=True)
    p.add_argument("--self", dest="self_raft", required=True)
    p.add_argument("--peers", required=True, help="comma-separated host:port of the other voters")
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--fsync", action="store_true", help="kfed only: fsync the journal per append (our default)")
    p.add_argument("--plan", required=True, help="JSON [[records_per_command, seconds], ...]")
    p.add_argument("--warmup-s", type=float, default=1.0)
    p.add_argument("--inflight", type=int, default=64)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    plan = [(int(k), float(s)) for k, s in json.loads(args.plan)]
    peers = [x for x in args.peers.split(",") if x]
    args.data_dir.mkdir(parents=True, exist_ok=True)

    # Built in the main thread, which stays alive for the whole run (pysyncobj's thread dies with it).
    node: RaftNode | None = None
    raw: RawCounter | None = None
    if args.impl == "kfed":
        node = RaftNode(args.self_raft, peers, args.data_dir, LogState(), RaftSettings(journal_fsync=args.fsync))
    else:
        raw = RawCounter(args.self_raft, peers, raw_conf(args.data_dir))

    syncobj: Any = node._syncobj if node is not None else raw
    _running.append(syncobj)
    counts = JournalCounts(bridge.journal_of(syncobj))
    try:
        return lead_or_follow(args, plan, node, raw)
    finally:
        stats = {"self": args.self_raft, "appends": counts.appends, "truncated": counts.truncated}
        Path(f"{args.out}.{args.self_raft.replace(':', '_')}.stats").write_text(json.dumps(stats))


def lead_or_follow(args: argparse.Namespace, plan: list[tuple[int, float]], node: Any, raw: Any) -> int:
    def is_leader() -> bool:
        return node.is_leader() if node is not None else bridge.leads(cast(RawCounter, raw))

    deadline = time.monotonic() + LEADER_WAIT_S
    while not is_leader():
        if time.monotonic() > deadline:
            time.sleep(3600)  # a follower: serve until the driver stops us
            return 0
        time.sleep(0.01)
    time.sleep(0.3)  # let the new leader commit its first entry
    if node is None:
        report(args, drive_raw(cast(RawCounter, raw), plan, args.warmup_s, args.inflight), raw)
        time.sleep(3600)  # keep leading until the driver stops us
        return 0

    async def kfed() -> None:
        # What a controller's leader does first in a new quorum (every voter runs this code): raise the
        # metadata version, so that commands are written as runs. The raw side sends the same bytes.
        await node.propose([Proposal((MetadataVersionChanged(LATEST_METADATA_VERSION),))])
        report(args, await drive_kfed(node, plan, args.warmup_s, args.inflight), node._syncobj)
        await asyncio.sleep(3600)  # keep the loop alive: proposals still in flight resolve on it

    asyncio.run(kfed())
    return 0


def report(args: argparse.Namespace, phases: list[Any], syncobj: Any) -> None:
    result = {
        "impl": args.impl,
        "fsync": args.fsync,
        "self": args.self_raft,
        "phases": phases,
        "conf": conf_summary(syncobj.conf),
        "journal": type(bridge.journal_of(syncobj)).__name__,
    }
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.rename(args.out)


if __name__ == "__main__":
    sys.exit(main())

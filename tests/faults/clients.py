"""Real HTTP clients of the quorum, each a thread recording what it did into the history.

- ``Writer``: varied admin writes (register clusters, create and delete topics, change partition and
  cluster states) with an Idempotency-Key each; an unknown outcome (timeout, lost connection, 5xx) is
  retried with the *same* key, on another node, until a definite answer.
- ``Tailer``: follows the log by offset with long polls (``GET /v1/log?offset&limit&wait_ms``), moving
  from node to node, and records every page it received.
- ``Observer``: polls one node's ``/v1/node`` (role, term, leader) and samples ``/v1/metadata``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import threading
import time
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from metadata_client.client import READS
from metadata_log.codec import record_from_dict
from metadata_log.snapshot import read_records
from metadata_log.views import metadata_view

from .history import History, record_digest

HEARTBEAT_THREADS = 8
REQUEST_TIMEOUT_S = 8.0  # above the controllers' 5 s commit timeout: their 504 comes first when they can answer
RETRY_PAUSE_S = 0.2
MAX_CLUSTERS_PER_WRITER = 8
MAX_TOPICS_PER_WRITER = 12
BOOTSTRAP = "127.0.0.1:9"  # never dialled: no agent runs in the harness


def _classify(response: httpx.Response) -> tuple[str, dict[str, Any]]:
    if 200 <= response.status_code < 300:
        extra = {"status": response.status_code, "offset": response.json()["offset"]}
        if response.headers.get("idempotent-replayed") == "true":
            extra["replayed"] = True
        return "ok", extra
    detail = ""
    with contextlib.suppress(ValueError):
        detail = str(response.json().get("detail", ""))[:200]
    # 5xx: 503 (no leader, leader unreachable) and 504 (commit outcome unknown) may hide a commit.
    outcome = "unknown" if response.status_code >= 500 else "failed"
    return outcome, {"status": response.status_code, "detail": detail}


def bearer(token: str | None) -> dict[str, str]:
    """The headers an admin client sends: the quorum's admin token, when it has one."""
    return {"Authorization": f"Bearer {token}"} if token else {}


class Writer(threading.Thread):
    def __init__(
        self, name: str, urls: list[str], history: History, seed: int, run_id: str, token: str | None = None
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.client_id = name
        self.urls = urls
        self.history = history
        self.rng = random.Random(f"{seed}/{name}")
        self.run_id = run_id
        self.region = f"r-{name}"
        self.clusters: dict[str, str] = {}  # id -> admin state, as this writer last saw it acknowledged
        self.topics: dict[str, int] = {}  # name -> partition count
        self.stop_flag = threading.Event()
        self.give_up_at = float("inf")  # monotonic time after which unknowns are no longer retried
        self.http = httpx.Client(timeout=REQUEST_TIMEOUT_S, headers=bearer(token))
        self.counter = 0
        self.writes = 0

    def run(self) -> None:
        try:
            while not self.stop_flag.is_set():
                self.write_once()
        finally:
            self.http.close()

    def next_write(self) -> tuple[str, dict[str, Any]]:
        n, rng = self.counter, self.rng
        self.counter += 1
        choices: list[tuple[float, str]] = [(1.0 if len(self.clusters) < MAX_CLUSTERS_PER_WRITER else 0.05, "register")]
        if self.clusters:
            choices += [(0.3 if len(self.topics) < MAX_TOPICS_PER_WRITER else 0.0, "create_topic"),
                        (0.1, "cluster_state")]  # fmt: skip
        if self.topics:
            choices += [(0.1 if len(self.topics) < MAX_TOPICS_PER_WRITER else 0.5, "delete_topic"),
                        (0.35, "partition_state")]  # fmt: skip
        kind = rng.choices([k for _, k in choices], [w for w, _ in choices])[0]
        if kind == "register":
            return kind, {"cluster_id": f"{self.client_id}-c{n}"}
        if kind == "create_topic":
            return kind, {"name": f"{self.client_id}-t{n}", "partitions_per_cluster": rng.randint(1, 2)}
        if kind == "delete_topic":
            return kind, {"name": rng.choice(sorted(self.topics))}
        if kind == "cluster_state":
            cluster = rng.choice(sorted(self.clusters))
            return kind, {
                "cluster_id": cluster,
                "state": "active" if self.clusters[cluster] != "active" else "read_only",
            }
        topic = rng.choice(sorted(self.topics))
        return kind, {"topic": topic, "partition": rng.randrange(max(1, self.topics[topic])),
                      "state": rng.choice(["read_only", "writable"])}  # fmt: skip

    def request(self, kind: str, args: dict[str, Any]) -> tuple[str, str, dict[str, Any] | None]:
        if kind == "register":
            body = {"cluster_id": args["cluster_id"], "region": self.region, "bootstrap_servers": BOOTSTRAP}
            return "POST", "/v1/clusters", body
        if kind == "create_topic":
            body = {
                "name": args["name"],
                "region": self.region,
                "partitions_per_cluster": args["partitions_per_cluster"],
            }
            return "POST", "/v1/topics", body
        if kind == "delete_topic":
            return "DELETE", f"/v1/topics/{args['name']}", None
        if kind == "cluster_state":
            return "PUT", f"/v1/clusters/{args['cluster_id']}/state", {"state": args["state"]}
        return "PUT", f"/v1/topics/{args['topic']}/partitions/{args['partition']}/state", {"state": args["state"]}

    def write_once(self, kind_args: tuple[str, dict[str, Any]] | None = None) -> str:
        """One logical write, retried with its key through unknown outcomes; returns the final outcome."""
        kind, args = kind_args or self.next_write()
        key = f"{self.run_id}-{self.client_id}-{self.counter}"
        method, path, body = self.request(kind, args)
        node = self.rng.randrange(len(self.urls))
        self.writes += 1
        while True:
            op: dict[str, Any] = {"client": self.client_id, "op": "write", "key": key, "kind": kind, **args,
                                  "node": node + 1, "call": self.history.now()}  # fmt: skip
            response = None
            try:
                response = self.http.request(method, self.urls[node] + path, json=body,
                                             headers={"Idempotency-Key": key})  # fmt: skip
                outcome, extra = _classify(response)
            except httpx.TimeoutException:
                outcome, extra = "unknown", {"error": "timeout"}
            except httpx.TransportError as e:
                outcome, extra = "unknown", {"error": type(e).__name__}
            op.update(ret=self.history.now(), outcome=outcome, **extra)
            self.history.add(op)
            if outcome == "ok":
                self._learn(kind, args, response)
                return outcome
            if outcome == "failed" or time.monotonic() > self.give_up_at:
                return outcome
            time.sleep(RETRY_PAUSE_S)
            node = (node + self.rng.randrange(1, len(self.urls))) % len(self.urls)  # another node

    def _learn(self, kind: str, args: dict[str, Any], response: httpx.Response | None) -> None:
        body = response.json() if response is not None else {}
        if kind == "register":
            self.clusters[args["cluster_id"]] = "active"
        elif kind == "cluster_state":
            self.clusters[args["cluster_id"]] = args["state"]
        elif kind == "create_topic":
            self.topics[args["name"]] = len(body.get("partitions", ())) or 1
        elif kind == "delete_topic":
            self.topics.pop(args["name"], None)


class Tailer(threading.Thread):
    """Reads the log from offset 0 and follows it across nodes until told where to stop; ``topics``: only the
    records of these topics and the federation-wide ones (``GET /v1/log?topics=``), as a client of them does."""

    def __init__(
        self, name: str, urls: list[str], history: History, seed: int, topics: Collection[str] | None = None
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.client_id = name
        self.urls = urls
        self.topics = None if topics is None else sorted(topics)
        self.history = history
        self.rng = random.Random(f"{seed}/{name}")
        self.next_offset = 0
        self.stop_at: int | None = None  # stop once every offset below this was read
        self.give_up_at = float("inf")
        self.http = httpx.Client(timeout=3.0)
        self.pages = 0
        self.records: list[dict[str, Any]] = []  # every record of the whole log read: the log below the nodes' dumps
        self.gone_in_a_row = 0

    def run(self) -> None:
        node = self.rng.randrange(len(self.urls))
        polls_here = 0
        try:
            while not (self.stop_at is not None and self.next_offset >= self.stop_at):
                if time.monotonic() > self.give_up_at:
                    return
                ok = self.poll(node)
                if self.gone_in_a_row >= 2 * len(self.urls):  # every node is past us: the API's snapshot path
                    self.load_snapshot(node)
                polls_here += 1
                if not ok or polls_here >= self.rng.randint(3, 12):  # follow across nodes
                    node = (node + self.rng.randrange(1, len(self.urls))) % len(self.urls)
                    polls_here = 0
                    if not ok:
                        time.sleep(RETRY_PAUSE_S)
        finally:
            self.http.close()

    def poll(self, node: int) -> bool:
        op: dict[str, Any] = {"client": self.client_id, "op": "tail", "node": node + 1, "offset": self.next_offset,
                              "call": self.history.now(), **self._topics()}  # fmt: skip
        try:
            params = {"offset": self.next_offset, "limit": 200, "wait_ms": 500, **READS, **self.selection}
            r = self.http.get(self.urls[node] + "/v1/log", params=params)
        except httpx.TimeoutException:
            op.update(ret=self.history.now(), outcome="unknown", error="timeout")
        except httpx.TransportError as e:
            op.update(ret=self.history.now(), outcome="unknown", error=type(e).__name__)
        else:
            if r.status_code == 200:
                body = r.json()
                records = body["records"]
                op.update(ret=self.history.now(), outcome="ok",
                          records=[[rec["offset"], record_digest(rec)] for rec in records])  # fmt: skip
                if self.topics is not None:  # pages skip what is not selected: they say where the next one starts
                    op["next_offset"] = self.next_offset = body["next_offset"]
                else:
                    if records:
                        self.next_offset = records[-1]["offset"] + 1
                    self.records += records
                self.pages += 1
            else:
                op.update(ret=self.history.now(), outcome="failed", status=r.status_code)
                if r.status_code == 410:
                    op.update(log_start_offset=r.json().get("log_start_offset"))
        self.gone_in_a_row = self.gone_in_a_row + 1 if op.get("status") == 410 else 0
        self.history.add(op)
        return op["outcome"] == "ok"

    def load_snapshot(self, node: int) -> None:
        """Below every node's window (410 everywhere): load the snapshot and go on after it."""
        call = self.history.now()
        try:
            r = self.http.get(self.urls[node] + "/v1/snapshot", params={**READS, **self.selection}, timeout=10)
            r.raise_for_status()
        except httpx.HTTPError:
            return
        body = r.json()
        image = read_records([record_from_dict(x["type"], x["data"]) for x in body["records"]], body["offset"])
        self.history.add({"client": self.client_id, "op": "snapshot", "node": node + 1, "call": call,
                          "ret": self.history.now(), "outcome": "ok", "offset": body["offset"],
                          "metadata": json.loads(json.dumps(metadata_view(image))), **self._topics()})  # fmt: skip
        self.next_offset = body["offset"] + 1
        self.gone_in_a_row = 0

    def _topics(self) -> dict[str, list[str]]:
        """What the history says of this tailer's selection (``checker.check_tails`` reads it)."""
        return {} if self.topics is None else {"topics": self.topics}

    @property
    def selection(self) -> dict[str, str]:
        """The ``topics=`` parameter of its reads (none: the whole log)."""
        return {} if self.topics is None else {"topics": ",".join(self.topics)}


class Observer(threading.Thread):
    """Polls one node's Raft status every ``period_s``; every ``metadata_every`` polls, its metadata too."""

    def __init__(
        self, node_id: int, url: str, history: History, period_s: float = 0.1, metadata_every: int = 25
    ) -> None:
        super().__init__(name=f"observer-{node_id}", daemon=True)
        self.node_id = node_id
        self.url = url
        self.history = history
        self.period_s = period_s
        self.metadata_every = metadata_every
        self.stop_flag = threading.Event()
        self.http = httpx.Client(timeout=0.5)

    def run(self) -> None:
        polls = 0
        try:
            while not self.stop_flag.wait(self.period_s):
                polls += 1
                self._get("/v1/node", self._on_node)
                if polls % self.metadata_every == 0:
                    self._get("/v1/metadata", self._on_metadata, timeout_s=3.0)
        finally:
            self.http.close()

    def _get(self, path: str, on_ok: Callable[[dict[str, Any], dict[str, Any]], None], timeout_s: float = 0.5) -> None:
        call = self.history.now()
        try:
            r = self.http.get(self.url + path, timeout=timeout_s)
        except httpx.HTTPError:
            return  # a node that does not answer tells nothing about leaders
        if r.status_code == 200:
            on_ok({"client": self.name, "node": self.node_id, "call": call, "ret": self.history.now()}, r.json())

    def _on_node(self, op: dict[str, Any], body: dict[str, Any]) -> None:
        self.history.add({**op, "op": "node", "outcome": "ok", "role": body["role"], "term": body["term"],
                          "leader_id": body["leader_id"], "applied_offset": body["applied_offset"]})  # fmt: skip

    def _on_metadata(self, op: dict[str, Any], body: dict[str, Any]) -> None:
        self.history.add({**op, "op": "metadata", "outcome": "ok", "offset": body["offset"], "body": body})


class Heartbeater(threading.Thread):
    """The agents of the clusters the writers register (which have none): every ``period_s`` one heartbeat
    per cluster that ``/v1/metadata`` lists outside ``skip_region``, to any node that answers, so that a real
    lease keeps them unfenced. Only the kill of a real agent should let a lease run out."""

    def __init__(
        self, urls: list[str], skip_region: str, seed: int, period_s: float = 0.5, token: str | None = None
    ) -> None:
        super().__init__(name="heartbeater", daemon=True)
        self.urls = urls
        self.skip_region = skip_region
        self.period_s = period_s
        self.rng = random.Random(f"{seed}/heartbeater")
        self.stop_flag = threading.Event()
        self.http = httpx.Client(
            timeout=1.0, limits=httpx.Limits(max_connections=HEARTBEAT_THREADS * 3), headers=bearer(token)
        )
        self.clusters: list[str] = []
        self.beats = self.failed = 0

    def run(self) -> None:
        node = self.rng.randrange(len(self.urls))
        # in parallel: one beat after another, a loaded host takes longer than a lease to beat them all
        with ThreadPoolExecutor(HEARTBEAT_THREADS, thread_name_prefix="heartbeat") as pool:
            try:
                while not self.stop_flag.wait(self.period_s):
                    node = self._refresh(node)
                    list(pool.map(self._beat, self.clusters, itertools.repeat(node)))
            finally:
                self.http.close()

    def _refresh(self, node: int) -> int:
        for _ in self.urls:
            try:
                clusters = self.http.get(self.urls[node] + "/v1/metadata").json()["clusters"]
            except (httpx.HTTPError, ValueError, KeyError):
                node = (node + 1) % len(self.urls)
                continue
            self.clusters = [c["cluster_id"] for c in clusters if c["region"] != self.skip_region]
            break
        return node

    def _beat(self, cluster_id: str, node: int) -> int:
        """One heartbeat, moving on to the next node until one takes it; the node that did."""
        for _ in self.urls:
            try:
                r = self.http.post(self.urls[node] + f"/v1/agents/{cluster_id}/heartbeat",
                                   json={"applied_offset": -1, "healthy": True, "reason": None})  # fmt: skip
                if r.status_code == 200:
                    self.beats += 1
                    return node
            except httpx.HTTPError:
                pass
            self.failed += 1
            node = (node + 1) % len(self.urls)
        return node

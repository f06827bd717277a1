"""``LogFollower``: tail a controller's log by offset over HTTP and keep a local image with the same apply.

Used by broker agents, the SDK and Spark jobs. It long-polls ``GET /v1/log`` from its next offset, loads
``GET /v1/snapshot`` when it starts from nothing or gets ``410 Gone`` (it fell below a node's retention
window), checks that offsets are contiguous, and fails over between controller URLs. It never moves its
image backwards: a snapshot older than what it already has (a lagging node) is ignored.

Its loop is not a ``retry.Call``: a tail has no deadline, and it tries every URL before it waits. It waits as
the clients do between attempts (``retry.backoff_s``: the back-off, or a controller's ``Retry-After``, within
the one cap).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import Any, Final, TypeVar

import httpx

from metadata_log.codec import MAX_DECODE_BYTES, CodecError, record_from_dict, unpack
from metadata_log.errors import NotAController, Unavailable
from metadata_log.heap import gc_paused
from metadata_log.image import EMPTY_IMAGE, InvalidRecord, MetadataImage, Touched, apply_touched
from metadata_log.publisher import LogDelta, MetadataPublisher, Publishers
from metadata_log.records import LATEST_METADATA_VERSION, Record, TopicCreated, TopicDeleted
from metadata_log.selection import Selection, backing_of, fits, offset_runs, page_records, topic_of
from metadata_log.snapshot import read_body

from .access import NO_ACCESS, Access
from .retry import backoff_s, controller_urls, reply_error, retry_after_s

log = logging.getLogger(__name__)

_T = TypeVar("_T")

MSGPACK: Final = "application/msgpack"
DEFAULT_WAIT_MS: Final = 10_000
DEFAULT_LIMIT: Final = 5_000


class FollowerError(Unavailable):
    """No controller could be reached, or they answered something that is not the kfed log."""


class LogFollower:
    """Follows the metadata log of a quorum given as a bootstrap list of controller URLs.

    ``publisher`` (and any ``subscribe``d later) gets ``on_update`` after every advance, on the thread that
    polled: the records applied, or a snapshot delta after a snapshot was loaded."""

    def __init__(
        self,
        controllers: Sequence[str] | str,
        *,
        wait_ms: int = DEFAULT_WAIT_MS,
        limit: int = DEFAULT_LIMIT,
        publisher: MetadataPublisher | None = None,
        client: httpx.Client | None = None,
        timeout_s: float = 5.0,
        access: Access = NO_ACCESS,
        topics: Collection[str] | None = None,
        clusters: Collection[str] = (),
    ) -> None:
        """``topics``: follow only these logical topics (``metadata_log.selection``): the image holds them, the
        leaders of their physical topics and every federation-wide kind; None: the whole log. ``clusters``: and
        every topic placed on these clusters, with all their leaders (a sub-cluster's agent)."""
        self.urls = controller_urls(controllers)
        self.clusters = frozenset(clusters)
        self.topics: frozenset[str] | None = (
            frozenset(topics) if topics is not None else frozenset() if self.clusters else None
        )
        self._asked = self.topics  # what requests select: the topics, or those a growing selection loads
        self._selected = threading.RLock()  # a page is applied, and the selection widened, one at a time
        self._generation = 0  # of the selection: a page asked for with an older one is dropped
        self._unloaded: frozenset[str] = frozenset()  # asked to follow, its snapshot not loaded: retried by polls
        self.wait_ms = wait_ms
        self.limit = limit
        self.image: MetadataImage = EMPTY_IMAGE
        self._publishers = Publishers()
        if publisher is not None:
            self._publishers.subscribe(publisher)
        self._client = client or access.http_client(httpx.Timeout(timeout_s + wait_ms / 1000, connect=timeout_s))
        self._owns_client = client is None
        self._current = 0
        self._advanced = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.snapshots_loaded = 0
        self.last_error: str | None = None
        self._retry_after_s: float | None = None  # what the last reply's Retry-After asked for
        self.caught_up = False
        """Whether the last page reached the log's end (the high watermark it was answered at)."""
        self.confirmed_at = float("-inf")
        """When (``time.monotonic()``) the image last held everything committed: the send time of the last
        ``GET /v1/log`` that reached the answering node's end, less how long before that node had last known
        its log current (``current_ms_ago``: a node cut off from the quorum ages). A producer's key-order lease
        is measured from it."""

    # -- state -------------------------------------------------------------------------------------
    @property
    def next_offset(self) -> int:
        return self.image.offset + 1

    @property
    def url(self) -> str:
        return self.urls[self._current]

    # -- one step ----------------------------------------------------------------------------------
    def poll(self, wait_ms: int | None = None) -> int:
        """Fetch and apply what follows ``next_offset`` (waiting up to ``wait_ms``); returns records applied.

        Network errors and 5xx move on to the next controller URL and are re-raised as ``FollowerError``
        only when every URL failed in a row.
        """
        wait = self.wait_ms if wait_ms is None else wait_ms
        return self._on_each_url(lambda: self._poll_once(wait))

    def _on_each_url(self, step: Callable[[], _T]) -> _T:
        """``step`` on the current controller URL, then on the next one while it fails; ``FollowerError`` once
        every URL failed in a row."""
        failures = 0
        while True:
            try:
                return step()
            except (httpx.HTTPError, FollowerError) as e:
                failures += 1
                self.last_error = f"{self.url}: {type(e).__name__}: {e}"
                log.debug("log follower: %s", self.last_error)
                self._current = (self._current + 1) % len(self.urls)
                if failures >= len(self.urls):
                    raise FollowerError(f"no controller reachable ({self.last_error})") from e

    def _poll_once(self, wait_ms: int) -> int:
        with self._selected:
            if self.image.offset < 0 and self.snapshots_loaded == 0:
                self.load_snapshot()
            if self._unloaded and self.topics is not None:  # on this URL only: poll tries each
                self._grow(_selection(self.topics | self._unloaded), self.image.offset)
                self._unloaded = frozenset()
            generation = self._generation
        sent = time.monotonic()
        r = self._get("/v1/log", {"offset": self.next_offset, "limit": self.limit, "wait_ms": wait_ms})
        with self._selected:
            if generation != self._generation:  # the selection grew meanwhile: this page lacks the new topics
                return 0
            return self._apply_page(r, sent)

    def _apply_page(self, r: httpx.Response, sent: float) -> int:
        if r.status_code == 410:
            log.info("offset %d is below %s's window; loading its snapshot", self.next_offset, self.url)
            self.load_snapshot()
            return 0
        if r.status_code != 200:
            raise FollowerError(f"GET /v1/log answered {r.status_code}: {reply_error(self.url, r)}")
        body = _unpack(r)
        if self.topics is not None:
            return self._advance_selected(body, sent)
        records: list[Record] = []
        expected = self.next_offset
        try:
            for item in body["records"]:
                offset = int(item["offset"])
                if offset != expected:
                    raise FollowerError(f"{self.url} sent offset {offset} where {expected} was expected")
                records.append(record_from_dict(item["type"], item["data"]))
                expected += 1
        except (CodecError, KeyError, TypeError, ValueError) as e:  # what a broken or hostile node may send
            raise FollowerError(f"records from {self.url} do not decode: {type(e).__name__}: {e}") from e
        if records:
            self._advance(records)
        self.caught_up = len(records) < self.limit  # a full page may have left records behind it
        if self.caught_up:
            self._confirm(body, sent)
        return len(records)

    def _confirm(self, body: Any, sent: float) -> None:
        """The page reached the node's end: the image is as current as the node (a node that does not say
        how current it is, from before ``current_ms_ago``, counts as current)."""
        age_ms = body.get("current_ms_ago", 0)
        if isinstance(age_ms, int) and not isinstance(age_ms, bool) and age_ms >= 0:
            self.confirmed_at = max(self.confirmed_at, sent - age_ms / 1000)

    def _advance_selected(self, body: Any, sent: float) -> int:
        """A page of the selected topics' records: each run of consecutive offsets applied at its own offsets,
        then the image moved to the page's end. A selected topic that gains a placement loads the snapshot."""
        try:
            end = int(body["next_offset"])
            pairs = page_records(body["records"], self.next_offset, end)
        except (CodecError, KeyError, TypeError, ValueError) as e:  # what a broken or hostile node may send
            raise FollowerError(f"records from {self.url} do not decode: {type(e).__name__}: {e}") from e
        held = set(self.image.topics)
        unheld = False  # a record of a topic not held: one expanded onto a selected cluster
        kept = []
        for offset, record in pairs:
            if isinstance(record, TopicCreated):
                held.add(record.name)
            elif isinstance(record, TopicDeleted):
                if record.name not in held:  # a follower of clusters is sent every deletion
                    continue
                held.discard(record.name)
            elif (topic := topic_of(record)) is not None and topic not in held:
                unheld = True
            kept.append((offset, record))
        runs = offset_runs(kept)
        if unheld:
            self.load_snapshot(at_least=end - 1)  # one that holds it: this page is read again after it
            return 0
        placed = backing_of(self.topics or (), self.image)
        for first, records in runs:
            self.image = replace(self.image, offset=first - 1)  # what was left out changed nothing here
            self._advance(records)
        if end - 1 > self.image.offset:
            base, image = self.image, replace(self.image, offset=end - 1)
            self._set_image(image, LogDelta.committed, base, [], image, Touched())
        if not backing_of(self.topics or (), self.image) <= placed:
            self.load_snapshot()  # leaders reported before a placement was this follower's were left out
        self.caught_up = end >= int(body.get("high_watermark", 0))
        if self.caught_up:
            self._confirm(body, sent)
        return sum(len(records) for _first, records in runs)

    def follows(self, topic: str) -> bool:
        """Whether the image holds ``topic`` (when it exists): the whole log, or a selection that has it."""
        return self.topics is None or topic in self.topics

    def follow(self, topics: Collection[str], at_least: int | None = None) -> None:
        """Follow these topics too (a follower of the whole log has them already): see ``select``. When their
        snapshot does not load, the follower's own polls retry it until it does (or a selection drops them)."""
        with self._selected:
            if self.topics is None or set(topics) <= self.topics:
                return
            wanted = self.topics | self._unloaded | frozenset(topics)
            try:
                self.select(wanted, at_least)
            except Exception:
                self._unloaded = wanted - self.topics
                raise

    def select(self, topics: Collection[str] | None, at_least: int | None = None) -> None:
        """Follow exactly these topics from now on; None, or more than a node accepts in one selection
        (``selection.fits``): the whole log. Topics left are dropped from the image at once; a selection that
        grows loads its snapshot now (one at least as new as the image, and as ``at_least``), on the caller's
        thread (it stays as it was when that fails), and a page asked for before is dropped."""
        with self._selected:
            wanted = _selection(topics)
            if wanted == self.topics:
                pass
            elif wanted is not None and (self.topics is None or wanted <= self.topics):  # narrows: nothing to fetch
                self.topics = self._asked = wanted
                self._generation += 1
                base, image = self.image, Selection.of(wanted, self.image, self.clusters).image(self.image)
                self._set_image(image, LogDelta.replaced, base, image)
            else:
                self._on_each_url(lambda: self._grow(wanted, self.image.offset if at_least is None else at_least))
            self._unloaded = frozenset()  # the selection is what was asked for

    def _grow(self, wanted: frozenset[str] | None, at_least: int) -> None:
        """Select ``wanted``, more than followed now, with a snapshot of the current URL at least as new as
        ``at_least``; the selection stays as it was when that fails (the image is still of the old one). Until
        the snapshot loaded, ``topics`` (and ``follows``) still say what the image holds."""
        self._asked = wanted
        self._generation += 1  # a page asked for meanwhile lacks the new topics
        try:
            self.load_snapshot(at_least=at_least)
        except Exception:
            self._asked = self.topics
            raise
        self.topics = wanted

    def load_snapshot(self, at_least: int | None = None) -> None:
        """Replace the image by the controller's snapshot, unless that would move it backwards. A follower of
        some topics, or one whose selection just grew, asks for one at least as new as its image (nodes reuse a
        snapshot for a while, and an older one would move it backwards); ``at_least``: and at least this one."""
        params: dict[str, int | str] = {"layout": "runs"}
        newest = max(self.image.offset, -1 if at_least is None else at_least)
        if (self._asked is not None or at_least is not None) and newest >= 0:
            params["min_offset"] = newest
        r = self._get("/v1/snapshot", params)
        if r.status_code != 200:
            raise FollowerError(f"GET /v1/snapshot answered {r.status_code}: {reply_error(self.url, r)}")
        with gc_paused():
            body = _unpack(r)
            try:
                offset = int(body["offset"])
            except (KeyError, TypeError, ValueError) as e:
                raise FollowerError(f"snapshot from {self.url} has no offset: {type(e).__name__}: {e}") from e
            if offset < self.image.offset:
                raise FollowerError(f"{self.url} is behind this follower (snapshot {offset} < {self.image.offset})")
            try:
                # runs; rows from a controller older than them (it ignores the parameter)
                image = read_body(body, offset)
            except (CodecError, InvalidRecord, KeyError, TypeError, ValueError) as e:
                raise FollowerError(f"snapshot from {self.url} does not decode: {e}") from e
        self.snapshots_loaded += 1
        self._set_image(image, LogDelta.replaced, self.image, image)

    def _get(self, path: str, params: dict[str, int | str] | None = None) -> httpx.Response:
        """GET a msgpack body, read at most MAX_DECODE_BYTES of it: a broken or hostile server cannot
        make the follower hold more than that in memory."""
        self._retry_after_s = None
        params = {**(params or {}), "metadata_version": LATEST_METADATA_VERSION}  # the records this code reads
        if self._asked is not None:
            params["topics"] = ",".join(sorted(self._asked))  # may be empty: the federation-wide kinds only
        if self.clusters and self._asked is not None:
            params["clusters"] = ",".join(sorted(self.clusters))
        with self._client.stream("GET", self.url + path, params=params, headers={"Accept": MSGPACK}) as r:
            if r.status_code != 200:
                self._retry_after_s = retry_after_s(r.headers)
            media_type = r.headers.get("content-type", "").split(";")[0].strip()
            if r.status_code == 200 and media_type != MSGPACK:  # not kfed's answer: do not read it
                raise FollowerError(str(NotAController(self.url, r.status_code, media_type)))
            declared = r.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > MAX_DECODE_BYTES:
                raise FollowerError(f"{self.url}{path} answered {declared} bytes, above {MAX_DECODE_BYTES}")
            chunks, size = [], 0
            for chunk in r.iter_bytes():
                size += len(chunk)
                if size > MAX_DECODE_BYTES:
                    raise FollowerError(f"{self.url}{path} sent more than {MAX_DECODE_BYTES} bytes")
                chunks.append(chunk)
        headers = [(k, v) for k, v in r.headers.items() if k.lower() not in ("content-encoding", "content-length")]
        return httpx.Response(r.status_code, headers=headers, content=b"".join(chunks), request=r.request)

    def _advance(self, records: list[Record]) -> None:
        try:
            image, touched = apply_touched(self.image, records)
        except InvalidRecord as e:  # the log never holds such records; a node serving them is broken
            raise FollowerError(f"record from {self.url} does not apply: {e}") from e
        self._set_image(image, LogDelta.committed, self.image, records, image, touched)

    def _set_image(self, image: MetadataImage, delta: Callable[..., LogDelta], *args: Any) -> None:
        """Advance to ``image``; publish it with ``delta(*args)``, what made it."""
        with self._advanced:
            self.image = image
            self._advanced.notify_all()
        self._publishers.publish(image, delta, *args)

    def subscribe(self, publisher: MetadataPublisher) -> None:
        """Publish to ``publisher`` too: a catch-up to the current image first, then every advance."""
        self._publishers.subscribe(publisher)

    # -- continuous --------------------------------------------------------------------------------
    def start(self) -> LogFollower:
        """Follow in a daemon thread until ``stop()``; errors back off and retry forever."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kfed-log-follower", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                self.poll()
                failures = 0
            except Exception as e:  # never let the thread die: its users would silently stop following
                # every controller was tried: the clients' back-off, or the last one's Retry-After
                failures += 1
                wait_s = backoff_s(failures, self._retry_after_s)
                if isinstance(e, FollowerError):
                    log.warning("log follower: %s; retrying in %.2f s", e, wait_s)
                else:
                    log.exception("log follower: unexpected error; retrying in %.2f s", wait_s)
                self._stopping.wait(wait_s)

    def wait_for(self, offset: int, timeout_s: float) -> bool:
        """Block until the image reflects ``offset`` (True) or ``timeout_s`` passes (False)."""
        deadline = time.monotonic() + timeout_s
        with self._advanced:
            while self.image.offset < offset:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._advanced.wait(remaining)
        return True

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=self.wait_ms / 1000 + 6)
            self._thread = None
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> LogFollower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _unpack(response: httpx.Response) -> Any:
    try:
        body = unpack(response.content)
    except CodecError as e:
        raise FollowerError(f"undecodable body from {response.url}: {e}") from e
    if not isinstance(body, dict):
        raise FollowerError(f"unexpected body from {response.url}")
    return body


def _selection(topics: Collection[str] | None) -> frozenset[str] | None:
    """What a follower selects for ``topics``: them, or the whole log (None) when more than a node accepts in
    one selection (``selection.fits``)."""
    return frozenset(topics) if topics is not None and fits(topics) else None

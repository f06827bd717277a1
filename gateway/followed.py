"""Which logical topics a gateway follows: those its clients use, not the whole federation.

A gateway starts following no topic (its image holds the federation-wide kinds only: clusters, groups,
gateways, the quorum; ``metadata_log/selection.py``). Then:

- a **Metadata request naming topics** follows them before it is answered (their snapshot is loaded first);
- so does **every other request that names topics** (Produce, Fetch, ListOffsets, the group's offsets and
  JoinGroup): a client may have asked another gateway for the metadata;
- a topic **no request named for** ``forget_after_s`` is dropped. Clients ask for the metadata of the topics
  they use at least every 5 minutes (Kafka's ``metadata.max.age.ms``, librdkafka's
  ``topic.metadata.refresh.interval.ms``), and every Produce or Fetch names its topics, so the default (15
  minutes) drops only what nobody uses;
- a **Metadata request for every topic** is answered whole while the federation holds at most
  ``MAX_ALL_TOPICS_PARTITIONS`` partitions: the topics the controllers list are followed by name, as a request
  naming them would (or, more than one selection holds, the whole log, until no such request came for
  ``forget_after_s``). Past that the answer would pass what a client should be sent at once (at 100 M
  partitions, Kafka's frame size): every topic is listed by name with ``INVALID_REQUEST`` and no partitions, and
  clients ask for their topics by name. Regex subscriptions over such a federation are not supported.

Names that are not legal topic names are never followed (they are unknown topics). A topic asked for by id
only (Metadata v10+) is known once some client asked for it by name.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Collection
from typing import Final

from metadata_client.client import AsyncControllerClient
from metadata_client.follower import LogFollower
from metadata_log.commands.common import MAX_NAME_CHARS
from metadata_log.errors import KfedError
from metadata_log.selection import fits

log = logging.getLogger(__name__)

MAX_ALL_TOPICS_PARTITIONS: Final = 100_000
"""Most partitions a Metadata request for every topic is answered with (about 4 MB): past it, each topic by
name with ``INVALID_REQUEST``."""

FORGET_AFTER_S: Final = 900.0
"""How long a topic no request named stays followed: three times clients' metadata refresh."""

CATCH_UP_S: Final = 2.0
"""Longest a request for every topic waits for the followed log to reach the offset its listing was read at."""

TOPIC_SIZES_TTL_S: Final = 5.0
"""How long the federation's topic list (asked of the controllers for a request for every topic, while
following some topics) is reused: a storm of such requests costs one listing."""

MAX_NAMED_TOPICS: Final = 10_000
"""Most topic names a gateway keeps track of: a client naming more (each a legal name) gets the rest as
unknown topics until some are forgotten, so its requests cannot grow the gateway's memory without bound."""

_TOPIC_NAME: Final = re.compile(rf"[A-Za-z0-9._-]{{1,{MAX_NAME_CHARS}}}")


def legal(name: str) -> bool:
    """Whether ``name`` may be a topic's (Kafka's rule, as the controllers apply it)."""
    return _TOPIC_NAME.fullmatch(name) is not None and name not in (".", "..")


class FollowedTopics:
    """The topics a gateway's follower selects, and when a request last named each. Used on the event loop;
    the follower's snapshot loads run in threads."""

    def __init__(
        self,
        follower: LogFollower,
        quorum: AsyncControllerClient,
        forget_after_s: float = FORGET_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.follower = follower
        self._quorum = quorum
        self.forget_after_s = forget_after_s
        self._clock = clock
        self._used: dict[str, float] = {}  # legal names a request named, and when last
        self._every_topic_at = float("-inf")  # when a request last asked for every topic
        self._sizes: tuple[float, int, dict[str, int]] | None = None  # (when, at which offset, partitions by topic)

    def _track(self, name: str, now: float) -> bool:
        """Note that a request named ``name``; False when it is not to be followed (illegal, or too many)."""
        if name not in self._used and (len(self._used) >= MAX_NAMED_TOPICS or not legal(name)):
            return False
        self._used[name] = now
        return True

    async def resolve(self, names: Collection[str], listed_at: int | None = None) -> None:
        """Follow ``names`` (the legal ones) before answering a request for them; a failure leaves them
        unknown for this answer (logged), as a topic of a controller out of reach is. ``listed_at``: the offset
        the names were listed at; the image is made at least as new (briefly waited for when they were followed
        already: a name followed before its topic was created is in the image once its creation is)."""
        now = self._clock()
        tracked = {name for name in names if self._track(name, now)}
        followed = all(self.follower.follows(name) for name in tracked)
        if followed and (listed_at is None or self.follower.image.offset >= listed_at):
            return
        try:
            await asyncio.to_thread(self._follow, tracked, listed_at)
        except Exception as e:
            log.warning("could not follow topics %s: %s", sorted(tracked)[:10], e)

    def _follow(self, names: Collection[str], listed_at: int | None) -> None:
        self.follower.follow(names, listed_at)  # a snapshot at least as new as listed_at, when any is new
        if listed_at is not None:
            self.follower.wait_for(listed_at, CATCH_UP_S)

    async def every_topic(self) -> tuple[list[str], bool]:
        """The names a request for every topic is answered with, and whether they are followed (the answer is
        whole) or too many partitions to send (listed by name only)."""
        self._every_topic_at = self._clock()
        if self.follower.topics is None:
            image = self.follower.image
            if image.partition_count() <= MAX_ALL_TOPICS_PARTITIONS:
                return sorted(image.topics), True
            names = sorted(image.topics)
            await asyncio.to_thread(self.follower.select, self._recent())  # grew past it: hold what is used
            return names, False
        listed_at, sizes = await self._topic_sizes()
        if sum(sizes.values()) > MAX_ALL_TOPICS_PARTITIONS:
            return sorted(sizes), False
        if fits(sizes):  # followed by name, as a request naming them is
            await self.resolve(sizes, listed_at)
            return sorted(sizes), True
        await asyncio.to_thread(self._follow_all, listed_at)
        return sorted(self.follower.image.topics), True

    def _follow_all(self, listed_at: int) -> None:
        """Follow the whole log, and wait (briefly) until it is as new as the listing: another node may have
        answered that, ahead of the one followed, and the answer should not miss a topic it named."""
        self.follower.select(None)
        self.follower.wait_for(listed_at, CATCH_UP_S)

    async def _topic_sizes(self) -> tuple[int, dict[str, int]]:
        now = self._clock()
        if self._sizes is None or now - self._sizes[0] > TOPIC_SIZES_TTL_S:
            try:
                self._sizes = (now, *await self._quorum.topic_sizes())
            except KfedError as e:  # answered with what the gateway holds
                log.warning("could not list the federation's topics: %s", e.detail)
                image = self.follower.image
                return image.offset, {name: len(t.partitions) for name, t in image.topics.items()}
        return self._sizes[1], self._sizes[2]

    def _recent(self) -> set[str]:
        now = self._clock()
        return {name for name, at in self._used.items() if now - at <= self.forget_after_s}

    async def forget(self) -> None:
        """Drop the topics no request named for ``forget_after_s``, and the whole log when no request asked
        for every topic that long. Only narrows (loads nothing), in a thread: a page may be being applied."""
        recent = self._recent()
        self._used = {name: self._used[name] for name in recent}
        followed = self.follower.topics
        if followed is None:
            if self._clock() - self._every_topic_at > self.forget_after_s:
                await asyncio.to_thread(self.follower.select, recent)
        elif not followed <= recent:
            await asyncio.to_thread(self.follower.select, followed & recent)

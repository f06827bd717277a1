"""The Raft rules kfed enforces on top of pysyncobj, as pure functions of values.

No I/O, no clock, no pysyncobj: the bridge (``bridge/``) reads pysyncobj's state, asks these, and writes the
answers back. Each rule cites what it implements: the Raft paper (Ongaro and Ousterhout, "In Search of an
Understandable Consensus Algorithm", 2014; "§5.3", "Figure 2") or Ongaro's thesis ("Consensus: Bridging Theory
and Practice", 2014; "thesis §9.6"). ``tests/unit/metadata_quorum/test_raft_rules.py`` holds a table of cases
for each.

pysyncobj 0.3.17 breaks some of these rules by itself (the docstrings say how); the bridge routes the messages
concerned through the rules instead.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

Entry = tuple[bytes, int, int]
"""A Raft log entry as pysyncobj holds it: (command, Raft index, term)."""

STALL_GUARD_MS: Final = 50
"""A Raft tick that takes this much longer than its socket wait is a stall of this node (see ``stall_excuse``)."""

PRE_VOTE_CLOCK_MARGIN_S: Final = 0.005
"""An election deadline this close to now counts as expired (see ``pre_vote_step``)."""


# -- log replication (§5.3, Figure 2) -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AppendPlan:
    """What a follower does with the entries of an ``append_entries`` whose ``prevLogIdx``/``prevLogTerm``
    matched its log (Raft, Figure 2, AppendEntries receiver steps 3-5)."""

    truncate_from: int | None  # first index where the follower's entry conflicts (other term); None: none does
    append: Sequence[Entry]  # the message's entries the follower does not hold yet, in order
    verified: int  # last index this message proves equal to the leader's log: prevLogIdx + len(entries)


def plan_append(term_at: Callable[[int], int | None], prev_idx: int, entries: Sequence[Entry]) -> AppendPlan:
    """Raft's follower rule (Figure 2, AppendEntries receiver steps 3-4; §5.3), given the follower's term at an
    index (``None`` past its last entry).

    "If an existing entry conflicts with a new one (same index but different terms), delete the existing
    entry and all that follow it; append any new entries not already in the log." An entry that matches
    is never deleted, so a late, repeated or reordered ``append_entries`` (one that carries fewer entries
    than the follower already holds) cannot remove entries it acknowledged; and only ``verified`` may
    bound the commit index: entries the follower holds past it were not checked by this message.
    pysyncobj 0.3.17 instead deletes every entry after ``prevLogIdx`` and appends the message's again.
    """
    for i, (_command, idx, term) in enumerate(entries):
        ours = term_at(idx)
        if ours is None:
            return AppendPlan(None, entries[i:], prev_idx + len(entries))
        if ours != term:
            return AppendPlan(idx, entries[i:], prev_idx + len(entries))
    return AppendPlan(None, (), prev_idx + len(entries))


def follower_commit(commit_index: int, last_index: int, leader_commit: int, verified: int) -> int:
    """The follower's commit index after an accepted ``append_entries`` (Figure 2, AppendEntries receiver step 5:
    "If leaderCommit > commitIndex, set commitIndex = min(leaderCommit, index of last new entry)").

    "Last new entry" is the last one this message verified (``AppendPlan.verified``), not the log's end: the
    entries past it were not checked against the leader's log. A commit index never moves back, except to the
    log's end after the follower had to truncate below it (which Raft rules out; kept as pysyncobj does)."""
    commit = min(commit_index, last_index)
    return max(commit, min(leader_commit, verified))


def guard_snapshot_commit(message: Any, own_commit_index: int) -> Any:
    """Keep a snapshot message from committing the follower's own, unchecked log entries (§7, Figure 13: an
    InstallSnapshot carries the last included index and term, never a commit index for the follower's log).

    pysyncobj 0.3.17 handles an ``append_entries`` that carries a snapshot chunk (no ``prevLogIdx``) by
    raising the follower's commit index to ``min(leader's commit, its own last index)`` without having
    checked its log against the leader's. A deposed leader that appended entries nobody else has (while
    cut off) then *applies* them when the new leader starts sending it a snapshot: records that were never
    committed are served (a tailer reads, at an offset, a record the quorum committed differently) until the
    snapshot replaces the state. Such messages may not raise the commit index: the snapshot itself, and the
    regular appends after it, bring the real one.
    """
    if isinstance(message, dict) and message.get("type") == "append_entries" and "prevLogIdx" not in message:
        commit = message.get("commit_index")
        if isinstance(commit, int) and commit > own_commit_index:
            return {**message, "commit_index": own_commit_index}
    return message


def stale_reply(message: Any, current_term: int) -> bool:
    """A follower's ``next_node_idx`` answers an ``append_entries`` of one term (the bridge stamps it): a leader
    may count it only in that term (§5.1: "If a server receives a request with a stale term number, it rejects
    the request"; the same holds for a reply). pysyncobj's replies carry no term, so an answer delayed past an
    election (a paused follower answering the node's previous leadership) would set the match index of the
    node's new leadership from a log that may since have changed. Unstamped replies (an older kfed) are taken
    as before."""
    if not isinstance(message, dict) or message.get("type") != "next_node_idx":
        return False
    term = message.get("term")
    return isinstance(term, int) and term != current_term


def is_progress_reply(message: Mapping[str, Any]) -> bool:
    """A follower's success answer to an ``append_entries``: it moves the match index up (§5.3), and it must not
    move the next index back. Entries sent after the answered message are in flight on the same TCP
    connection; a follower that misses some (a new connection) answers with ``reset``, which does."""
    return message.get("type") == "next_node_idx" and message.get("success") is True and not message.get("reset")


def next_index_after_progress(sent_up_to: int | None, next_index: int | None) -> int | None:
    """The leader's next index for a follower after a success answer (§5.3: "If successful: update nextIndex and
    matchIndex for follower"), given what it had already sent and what pysyncobj set from the answer.

    pysyncobj sets the next index from every success, also to below what it already sent: it would then send
    those entries again (the same bytes twice or more under bulk writes). The index stays where it was
    instead; a follower that really lacks them answers ``reset`` (see ``is_progress_reply``). None: leave
    pysyncobj's value."""
    if sent_up_to is None or next_index is None or next_index >= sent_up_to:
        return None
    return sent_up_to


# -- elections: pre-vote (thesis §9.6) ------------------------------------------------------------------
class PreVote:
    """The Raft pre-vote (thesis §9.6), which pysyncobj lacks.

    Without it a node that missed its leader's heartbeats for its own reasons (a wiped follower replaying
    the log, a process that stalled) raises the term when it campaigns, and the healthy leader steps down
    on seeing it, again after every catch-up that outlasts an election timeout. With it, a node whose election
    timeout expired first sends ``kfed_pre_vote`` for the next term. A peer agrees only if it has not heard
    from a leader for its configured minimum election timeout and the asker's log is at least as up to date
    as its own; nobody's term changes. Terms are not compared: a node whose term lags but whose log holds
    the last committed entry must still be electable (its real elections then raise its term, as without
    pre-vote). Only with a majority does the node run pysyncobj's election, and a leader heard meanwhile
    cancels the round. A leadership transfer (``timeout_now``, thesis §3.10) campaigns at once, as before.
    """

    REQUEST: Final = "kfed_pre_vote"
    REPLY: Final = "kfed_pre_vote_reply"

    def __init__(self) -> None:
        self.term: int | None = None  # the term of the round this node runs, if any
        self.granted: set[Hashable] = set()
        self.won = False  # a majority agreed: campaign on the next tick

    def start(self, term: int | None) -> None:
        """A new round for ``term``; None ends any round (a leader was heard, or the node campaigns)."""
        self.term, self.granted, self.won = term, set(), False

    def cancel(self) -> None:
        """End the round, if one runs (called for every heartbeat: nothing is built when none does)."""
        if self.term is not None:
            self.start(None)

    def answer(self, granted_by: Hashable, term: int, granted: bool, voters: int) -> None:
        """Count a peer's answer to this round (each peer once); ``voters`` includes this node (§5.2: a
        majority of the full cluster)."""
        if term != self.term or not granted or self.won:
            return
        self.granted.add(granted_by)
        self.won = len(self.granted) + 1 > voters / 2  # + 1: its own

    @staticmethod
    def agree(
        asked_log: tuple[int, int],
        own_log: tuple[int, int],
        leader_heard_s: float,
        min_timeout_s: float,
        is_leader: bool,
    ) -> bool:
        """Would this node vote for the asker? ``*_log`` are (last term, last index): §5.4.1's "at least as
        up-to-date" is exactly the tuple order. Thesis §9.6 adds: not while it hears a leader (§4.2.3)."""
        return not is_leader and leader_heard_s >= min_timeout_s and asked_log >= own_log


class PreVoteStep(Enum):
    """What a tick does about elections before pysyncobj's own election check runs (see ``pre_vote_step``)."""

    WAIT = "wait"  # nothing: a leader, a live deadline, a transfer, or no peers
    CAMPAIGN = "campaign"  # a majority agreed: let pysyncobj campaign now
    ASK = "ask"  # the election timeout expired: ask the peers first


def pre_vote_step(
    is_leader: bool,
    election_deadline: float,
    now: float,
    transfer_in_progress: bool,
    has_peers: bool,
    is_voter: bool,
    won: bool,
) -> PreVoteStep:
    """The pre-vote's decision at the start of a tick (thesis §9.6).

    pysyncobj reads its clock again a moment after this: a deadline falling in between is taken as expired
    here (``PRE_VOTE_CLOCK_MARGIN_S``), so the node never campaigns without asking first. A leadership transfer
    (thesis §3.10) campaigns without asking: the leader itself asked for it."""
    if is_leader or transfer_in_progress or not has_peers or not is_voter:
        return PreVoteStep.WAIT
    if election_deadline >= now + PRE_VOTE_CLOCK_MARGIN_S:
        return PreVoteStep.WAIT
    return PreVoteStep.CAMPAIGN if won else PreVoteStep.ASK


# -- timing: this node's own stalls are not its peers' silence (§5.6, thesis §6.2) --------------------------
@dataclass(frozen=True, slots=True)
class TickMark:
    """What a Raft tick started with: when, how long its socket poll may wait, and the peers' clocks."""

    started: float
    wait_s: float
    election_deadline: float
    last_replies: dict[Any, float]


@dataclass(frozen=True, slots=True)
class StallExcuse:
    """How a stalled tick moves the failure-detection clocks: the new election deadline and the peers' new
    last-reply times (only those that change)."""

    stalled_s: float
    election_deadline: float
    last_replies: dict[Any, float]


def stall_excuse(
    mark: TickMark, now: float, election_deadline: float, last_replies: Mapping[Any, float]
) -> StallExcuse | None:
    """After a tick that took longer than its poll wait plus ``STALL_GUARD_MS``: the election deadline and the
    leader's last-reply times that nothing refreshed since ``mark``, moved on by the excess (never past
    ``now``). None: no stall.

    Raft's timing requirement (§5.6: broadcastTime << electionTimeout) assumes a node reads its messages when
    they arrive. A tick checks the election deadline (follower, §5.2) and the peers' last replies (leader,
    CheckQuorum, thesis §6.2) first, then does its work, and reads its sockets last. When a tick took longer
    than its wait (a catch-up backlog of applies, the GIL held by a garbage collection, a dump or a big decode),
    heartbeats and replies may still wait unread while the clock says the peers were silent: a follower would
    start an election and depose a healthy leader, a leader would step down. A peer that is really silent is
    noticed that much later."""
    stalled = now - mark.started - mark.wait_s
    if stalled <= STALL_GUARD_MS / 1000:
        return None
    deadline = election_deadline + stalled if election_deadline == mark.election_deadline else election_deadline
    moved = {peer: min(now, at + stalled) for peer, at in last_replies.items() if mark.last_replies.get(peer) == at}
    return StallExcuse(stalled, deadline, moved)

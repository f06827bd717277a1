"""The Raft rules, table-driven as etcd's raft tests are: each table is one rule, each row a case, and each rule
names the section of the Raft paper (or of Ongaro's thesis) it implements. No node, no clock, no pysyncobj."""

from __future__ import annotations

from typing import Any

import pytest

from metadata_quorum import rules
from metadata_quorum.rules import PreVote, PreVoteStep, StallExcuse, TickMark


def test_guard_keeps_a_snapshot_message_from_committing_unchecked_entries() -> None:
    chunk = {"type": "append_entries", "term": 9, "commit_index": 500, "serialized": ("data", True, False)}
    assert rules.guard_snapshot_commit(chunk, 120)["commit_index"] == 120
    regular = {"type": "append_entries", "term": 9, "commit_index": 500, "prevLogIdx": 499, "prevLogTerm": 9}
    assert rules.guard_snapshot_commit(regular, 120) is regular  # checked against the log: may commit


def test_plan_append_deletes_only_from_the_first_conflict() -> None:
    log = {1: 0, 2: 1, 3: 1, 4: 1, 5: 1}  # index -> term
    e = [(b"x", i, t) for i, t in ((2, 1), (3, 1), (4, 2), (5, 2))]
    # a repeated/late message whose entries all match, shorter than the log: nothing deleted or appended
    assert rules.plan_append(log.get, 1, e[:2]) == rules.AppendPlan(None, (), 3)
    assert rules.plan_append(log.get, 2, []) == rules.AppendPlan(None, (), 2)  # a heartbeat verifies prevLogIdx
    # a conflict (index 4: term 1 here, 2 in the message) deletes from there and appends the rest
    assert rules.plan_append(log.get, 1, e) == rules.AppendPlan(4, e[2:], 5)
    # past the end: append what is new only
    longer = [*e[:2], (b"y", 4, 1), (b"y", 5, 1), (b"y", 6, 1)]
    assert rules.plan_append(log.get, 1, longer) == rules.AppendPlan(None, longer[4:], 6)


def test_pre_vote_rules() -> None:
    # a peer agrees only if it is not the leader, heard no leader for an election timeout, and the asker's
    # log (last term, last index) is at least as up to date as its own
    assert rules.PreVote.agree((3, 10), (3, 10), 0.5, 0.3, is_leader=False)
    assert rules.PreVote.agree((4, 2), (3, 10), 0.5, 0.3, is_leader=False)
    assert not rules.PreVote.agree((3, 9), (3, 10), 0.5, 0.3, is_leader=False)  # behind: a wiped follower
    assert not rules.PreVote.agree((3, 10), (3, 10), 0.1, 0.3, is_leader=False)  # its leader is alive
    assert not rules.PreVote.agree((3, 10), (3, 10), 9.0, 0.3, is_leader=True)
    votes = rules.PreVote()
    votes.start(5)
    votes.answer("b", 4, True, voters=3)  # an answer to an older round
    votes.answer("b", 5, False, voters=3)
    assert not votes.won and not votes.granted
    votes.answer("b", 5, True, voters=3)
    assert votes.won  # itself + b of 3
    votes.start(6)
    votes.answer("b", 6, True, voters=5)
    assert not votes.won
    votes.answer("b", 6, True, voters=5)  # the same peer twice counts once
    votes.answer("c", 6, True, voters=5)
    assert votes.won
    votes.cancel()  # a leader was heard
    assert votes.term is None and not votes.won and not votes.granted
    votes.answer("d", 6, True, voters=5)
    assert not votes.granted


def test_a_leader_ignores_replies_to_another_term() -> None:
    reply = {"type": "next_node_idx", "next_node_idx": 9, "reset": False, "success": True}
    assert rules.stale_reply({**reply, "term": 4}, 5)
    assert not rules.stale_reply({**reply, "term": 5}, 5)
    assert not rules.stale_reply(reply, 5)  # unstamped (an older kfed): as before
    assert not rules.stale_reply({"type": "append_entries", "term": 4}, 5)


def test_only_a_plain_success_answer_keeps_the_leaders_next_index_ahead() -> None:
    def reply(**fields: object) -> dict[str, object]:
        return {"type": "next_node_idx", "next_node_idx": 7, "reset": False, "success": True, "term": 3, **fields}

    assert rules.is_progress_reply(reply())
    assert not rules.is_progress_reply(reply(reset=True))  # the follower lacks entries: go back
    assert not rules.is_progress_reply(reply(success=False, reset=True))
    assert not rules.is_progress_reply(reply(success=1))
    assert not rules.is_progress_reply({"type": "append_entries", "success": True})


# -- §5.3, Figure 2, AppendEntries receiver steps 3-4 ---------------------------------------------------------
LOG = {1: 0, 2: 1, 3: 1, 4: 1, 5: 1}  # the follower's log: index -> term


def entries(*index_terms: tuple[int, int]) -> list[tuple[bytes, int, int]]:
    return [(b"x", i, t) for i, t in index_terms]


@pytest.mark.parametrize(
    ("prev_idx", "message", "truncate_from", "append", "verified"),
    [
        pytest.param(5, [], None, [], 5, id="heartbeat: verifies prevLogIdx only"),
        pytest.param(1, [(2, 1), (3, 1)], None, [], 3, id="all held: nothing deleted, nothing appended"),
        pytest.param(5, [(6, 1), (7, 2)], None, [(6, 1), (7, 2)], 7, id="all new: appended"),
        pytest.param(3, [(4, 1), (5, 1), (6, 2)], None, [(6, 2)], 6, id="overlap: only the new tail"),
        pytest.param(3, [(4, 2), (5, 2)], 4, [(4, 2), (5, 2)], 5, id="conflict: delete from it, append the rest"),
        pytest.param(1, [(2, 1), (3, 1), (4, 2)], 4, [(4, 2)], 4, id="conflict after matches: from the conflict"),
        pytest.param(1, [(2, 1)], None, [], 2, id="late and short: the held 3..5 stay, not verified"),
    ],
)
def test_append_keeps_matching_entries_and_deletes_from_the_first_conflict(
    prev_idx: int, message: list[tuple[int, int]], truncate_from: int | None, append: list[tuple[int, int]],
    verified: int,
) -> None:  # fmt: skip
    plan = rules.plan_append(LOG.get, prev_idx, entries(*message))
    assert (plan.truncate_from, list(plan.append), plan.verified) == (truncate_from, entries(*append), verified)


# -- Figure 2, AppendEntries receiver step 5 ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("commit", "last", "leader_commit", "verified", "expected"),
    [
        pytest.param(3, 9, 7, 9, 7, id="leader's commit below what was verified"),
        pytest.param(3, 9, 9, 5, 5, id="only up to the last entry this message verified"),
        pytest.param(6, 9, 9, 5, 6, id="never back because a message verified less"),
        pytest.param(6, 9, 4, 9, 6, id="never back because the leader's commit is older"),
        pytest.param(8, 5, 9, 5, 5, id="clamped to the log after a truncation below it"),
    ],
)
def test_the_commit_index_rises_to_the_leaders_bounded_by_what_was_verified(
    commit: int, last: int, leader_commit: int, verified: int, expected: int
) -> None:
    assert rules.follower_commit(commit, last, leader_commit, verified) == expected


# -- §7, Figure 13: a snapshot message does not vouch for the follower's log ---------------------------------
@pytest.mark.parametrize(
    ("message", "own_commit", "commit_after"),
    [
        pytest.param(
            {"type": "append_entries", "term": 9, "commit_index": 500, "serialized": (b"", True, False)},
            120,
            120,
            id="snapshot chunk: capped at the follower's own",
        ),
        pytest.param(
            {"type": "append_entries", "term": 9, "commit_index": 100, "serialized": None},
            120,
            100,
            id="snapshot chunk below: untouched",
        ),
        pytest.param(
            {"type": "append_entries", "term": 9, "commit_index": 500, "prevLogIdx": 499, "prevLogTerm": 9},
            120,
            500,
            id="regular append: checked against the log, may commit",
        ),
        pytest.param({"type": "request_vote", "term": 9, "commit_index": 500}, 120, 500, id="other messages"),
    ],
)
def test_a_snapshot_message_cannot_raise_the_commit_index(message: dict[str, Any], own_commit: int,
                                                          commit_after: int) -> None:  # fmt: skip
    guarded = rules.guard_snapshot_commit(message, own_commit)
    assert guarded["commit_index"] == commit_after
    assert message["commit_index"] in (500, 100)  # the message itself is not changed


# -- §5.1: replies of another term are not counted; §5.3: nextIndex does not move back -----------------------
REPLY = {"type": "next_node_idx", "next_node_idx": 9, "reset": False, "success": True}


@pytest.mark.parametrize(
    ("message", "term", "stale"),
    [
        pytest.param({**REPLY, "term": 4}, 5, True, id="an answer to the previous leadership"),
        pytest.param({**REPLY, "term": 6}, 5, True, id="an answer stamped with a later term"),
        pytest.param({**REPLY, "term": 5}, 5, False, id="this term"),
        pytest.param(REPLY, 5, False, id="unstamped (an older kfed)"),
        pytest.param({**REPLY, "term": "5"}, 5, False, id="a stamp that is no term"),
        pytest.param({"type": "append_entries", "term": 4}, 5, False, id="not a reply"),
        pytest.param("127.0.0.1:1", 5, False, id="not a dict"),
    ],
)
def test_replies_count_only_in_the_term_they_answer(message: Any, term: int, stale: bool) -> None:
    assert rules.stale_reply(message, term) is stale


@pytest.mark.parametrize(
    ("sent_up_to", "after_reply", "kept"),
    [
        pytest.param(20, 9, 20, id="a success for older entries: stays ahead"),
        pytest.param(20, 25, None, id="moved forward: pysyncobj's value"),
        pytest.param(20, 20, None, id="unchanged"),
        pytest.param(None, 9, None, id="nothing sent yet"),
        pytest.param(20, None, None, id="no longer a peer"),
    ],
)
def test_the_next_index_does_not_move_back_on_a_success(sent_up_to: int | None, after_reply: int | None,
                                                        kept: int | None) -> None:  # fmt: skip
    assert rules.next_index_after_progress(sent_up_to, after_reply) == kept


# -- thesis §9.6: pre-vote ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("asked", "own", "heard_s", "is_leader", "agree"),
    [
        pytest.param((3, 10), (3, 10), 0.5, False, True, id="as up to date, no leader heard"),
        pytest.param((4, 2), (3, 10), 0.5, False, True, id="later last term wins over a longer log (§5.4.1)"),
        pytest.param((3, 11), (3, 10), 0.5, False, True, id="same term, longer log"),
        pytest.param((3, 9), (3, 10), 0.5, False, False, id="behind: a wiped follower"),
        pytest.param((2, 99), (3, 10), 0.5, False, False, id="an older last term loses to a shorter log"),
        pytest.param((3, 10), (3, 10), 0.1, False, False, id="a leader heard within the timeout (§4.2.3)"),
        pytest.param((9, 99), (3, 10), 9.0, True, False, id="a leader never agrees"),
    ],
)
def test_a_peer_agrees_to_a_pre_vote_only_for_an_up_to_date_log_and_no_live_leader(
    asked: tuple[int, int], own: tuple[int, int], heard_s: float, is_leader: bool, agree: bool
) -> None:
    assert PreVote.agree(asked, own, heard_s, 0.3, is_leader=is_leader) is agree


@pytest.mark.parametrize(
    ("answers", "voters", "won"),
    [
        pytest.param([("b", 5, True)], 3, True, id="itself and one of three"),
        pytest.param([("b", 5, True)], 5, False, id="itself and one of five"),
        pytest.param([("b", 5, True), ("b", 5, True)], 5, False, id="the same peer counts once"),
        pytest.param([("b", 5, True), ("c", 5, True)], 5, True, id="itself and two of five"),
        pytest.param([("b", 4, True)], 3, False, id="an answer to an older round"),
        pytest.param([("b", 5, False)], 3, False, id="a refusal"),
        pytest.param([("b", 5, True)], 4, False, id="itself and one of four: half is no majority"),
    ],
)
def test_a_pre_vote_round_is_won_by_a_majority_of_the_voters(answers: list[tuple[str, int, bool]], voters: int,
                                                             won: bool) -> None:  # fmt: skip
    votes = PreVote()
    votes.start(5)
    for peer, term, granted in answers:
        votes.answer(peer, term, granted, voters)
    assert votes.won is won


NOW = 100.0


@pytest.mark.parametrize(
    ("situation", "step"),
    [
        pytest.param({}, PreVoteStep.ASK, id="timeout expired: ask first"),
        pytest.param({"won": True}, PreVoteStep.CAMPAIGN, id="a majority agreed: campaign"),
        pytest.param({"deadline": NOW + 1}, PreVoteStep.WAIT, id="timeout not expired"),
        pytest.param({"deadline": NOW + 0.001}, PreVoteStep.ASK, id="expiring within the clock margin: ask"),
        pytest.param({"is_leader": True}, PreVoteStep.WAIT, id="a leader"),
        pytest.param({"transfer": True}, PreVoteStep.WAIT, id="a leadership transfer campaigns at once (§3.10)"),
        pytest.param({"has_peers": False}, PreVoteStep.WAIT, id="a single voter elects itself"),
        pytest.param({"is_voter": False}, PreVoteStep.WAIT, id="a read-only node"),
    ],
)
def test_an_expired_election_timeout_asks_before_it_campaigns(situation: dict[str, Any], step: PreVoteStep) -> None:
    s = {"is_leader": False, "deadline": NOW - 1, "transfer": False, "has_peers": True, "is_voter": True,
         "won": False, **situation}  # fmt: skip
    assert rules.pre_vote_step(s["is_leader"], s["deadline"], NOW, s["transfer"], s["has_peers"], s["is_voter"],
                               s["won"]) is step  # fmt: skip


# -- §5.6 (timing) and thesis §6.2 (CheckQuorum): a node's own stall is not its peers' silence -------------------
MARK = TickMark(started=NOW - 1.0, wait_s=0.05, election_deadline=NOW - 0.1, last_replies={"b": NOW - 0.9, "c": 0.0})


@pytest.mark.parametrize(
    ("now", "deadline", "replies", "excuse"),
    [
        pytest.param(NOW - 0.91, NOW - 0.1, MARK.last_replies, None, id="within the wait plus the guard"),
        pytest.param(
            NOW,
            NOW - 0.1,
            {"b": NOW - 0.9},
            StallExcuse(0.95, NOW + 0.85, {"b": NOW}),
            id="stalled: the deadline and the silent peer move on, capped at now",
        ),
        pytest.param(
            NOW,
            NOW + 5,
            {"b": NOW - 0.9},
            StallExcuse(0.95, NOW + 5, {"b": NOW}),
            id="a deadline refreshed meanwhile is kept",
        ),
        pytest.param(
            NOW, NOW - 0.1, {"b": NOW - 0.05}, StallExcuse(0.95, NOW + 0.85, {}), id="a peer heard meanwhile is kept"
        ),
        pytest.param(
            NOW,
            NOW - 0.1,
            {"b": NOW - 0.9, "d": NOW - 3},
            StallExcuse(0.95, NOW + 0.85, {"b": NOW}),
            id="a peer added meanwhile is not moved",
        ),
    ],
)
def test_a_stalled_tick_moves_only_the_clocks_nothing_refreshed(now: float, deadline: float,
                                                                replies: dict[str, float],
                                                                excuse: StallExcuse | None) -> None:  # fmt: skip
    got = rules.stall_excuse(MARK, now, deadline, replies)
    if excuse is None:
        assert got is None
        return
    assert got is not None
    assert got.stalled_s == pytest.approx(excuse.stalled_s)
    assert got.election_deadline == pytest.approx(excuse.election_deadline)
    assert got.last_replies == pytest.approx(excuse.last_replies)

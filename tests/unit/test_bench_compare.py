"""``python -m bench.compare --goals``, the table of BENCHMARKS.md's current results: one row per goal, the
latest full run's figure of each."""

from __future__ import annotations

from typing import Any

from bench.compare import latest_goals


def run(value: float, quick: bool = False, goal: str | None = ">= 1 x") -> dict[str, Any]:
    row = {"metric": "ratio", "value": value, "unit": "x", "goal": goal, "status": "PASS"}
    return {"sizes": {"quick": quick}, "results": [{"name": "sdk", "rows": [row]}]}


def test_each_goal_gets_the_figure_of_the_last_full_run_that_measured_it() -> None:
    table = latest_goals([run(1.5), run(2.5), run(9.5, quick=True)])
    rows = [line for line in table.splitlines() if line.startswith("| sdk")]
    assert len(rows) == 1 and "2.5 x" in rows[0] and "`python -m bench --only sdk`" in rows[0]


def test_a_figure_without_a_goal_is_not_a_row() -> None:
    assert "| sdk" not in latest_goals([run(1.5, goal=None)])

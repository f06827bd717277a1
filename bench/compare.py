"""``python -m bench.compare BEFORE.json AFTER.json``: two full runs side by side, one row per figure;
``python -m bench.compare --goals RUN.json [MORE.json ...]``: one row per goal, the latest figure of each.

Reads the ``run-<stamp>.json`` files ``python -m bench`` writes. Side by side: each benchmark's figures in the
order the later run printed them, the earlier run's value beside each (blank where the earlier code had no such
figure), the goal, and the later run's status; rows are matched by benchmark name and metric text. ``--goals``
prints BENCHMARKS.md's current results: every figure that has a goal, from the last of the runs given that
measured it (a later ``--only`` run updates the figures it measured), with the command that measures it again.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from .common import fmt, markdown_table


def load(path: Path) -> dict[str, Any]:
    run: dict[str, Any] = orjson.loads(path.read_bytes())
    return run


def rows_by_metric(run: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["name"], row["metric"]): row for r in run["results"] for row in r["rows"]}


def value_text(row: dict[str, Any] | None) -> str:
    if row is None:
        return ""
    value = row["value"]
    return f"{fmt(value)} {row['unit']}".strip() if value is not None else "n/a"


def compare(before: dict[str, Any], after: dict[str, Any]) -> str:
    earlier = rows_by_metric(before)
    table = []
    for result in after["results"]:
        if result.get("error"):
            table.append([result["name"], f"failed: {result['error']}", "", "", "", ""])
        for row in result["rows"]:
            table.append([
                result["name"],
                row["metric"],
                value_text(earlier.get((result["name"], row["metric"]))),
                value_text(row),
                row["goal"] or "",
                row["status"] or "",
            ])  # fmt: skip
    return markdown_table(["bench", "figure", "before", "after", "goal", "status (after)"], table)


def latest_goals(runs: Sequence[dict[str, Any]]) -> str:
    """One row per figure with a goal: the last run that measured it wins; a ``--quick`` run's tiny sizes are
    not comparable with the goals, so it measures none of them."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for run in runs:
        if run.get("sizes", {}).get("quick"):
            continue
        for result in run["results"]:
            for row in result["rows"]:
                if row["goal"]:
                    latest[result["name"], row["metric"]] = row
    table = [
        [name, metric, value_text(row), row["goal"], row["status"] or "", f"`python -m bench --only {name}`"]
        for (name, metric), row in latest.items()
    ]
    return markdown_table(["bench", "figure", "latest", "goal", "status", "measured again by"], table)


def describe(label: str, run: dict[str, Any]) -> str:
    machine = run.get("machine", {})
    head = machine.get("git", {}).get("head", "?")[:7]
    minutes = run.get("elapsed_s", 0) / 60
    load = machine.get("loadavg", [])
    return f"{label}: commit {head}, run {run.get('stamp', '?')}, {minutes:.1f} min, load average at start {load}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--goals", action="store_true", help="one row per goal, from the runs given, latest last")
    parser.add_argument("runs", type=Path, nargs="+", help="run-<stamp>.json files: BEFORE AFTER, or with --goals any")
    args = parser.parse_args(argv)
    if args.goals:
        print(latest_goals([load(path) for path in args.runs]))
        return 0
    if len(args.runs) != 2:
        parser.error("side by side takes two runs: BEFORE AFTER")
    before, after = load(args.runs[0]), load(args.runs[1])
    print(describe("before", before))
    print(describe("after", after))
    print()
    print(compare(before, after))
    return 0


if __name__ == "__main__":
    sys.exit(main())

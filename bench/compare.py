"""``python -m bench.compare BEFORE.json AFTER.json``: two full runs side by side, one row per figure.

Reads the ``run-<stamp>.json`` files ``python -m bench`` writes, and prints the Markdown table that
BENCHMARKS.md's current results are: each benchmark's figures in the order the later run printed them, the
earlier run's value beside each (blank where the earlier code had no such figure), the goal, and the later
run's status. Rows are matched by benchmark name and metric text.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.common import fmt, markdown_table


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


def describe(label: str, run: dict[str, Any]) -> str:
    machine = run.get("machine", {})
    head = machine.get("git", {}).get("head", "?")[:7]
    minutes = run.get("elapsed_s", 0) / 60
    load = machine.get("loadavg", [])
    return f"{label}: commit {head}, run {run.get('stamp', '?')}, {minutes:.1f} min, load average at start {load}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="the earlier run's run-<stamp>.json")
    parser.add_argument("after", type=Path, help="the later run's run-<stamp>.json")
    args = parser.parse_args(argv)
    before, after = load(args.before), load(args.after)
    print(describe("before", before))
    print(describe("after", after))
    print()
    print(compare(before, after))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Check: can this cluster's executors run the kfed source? Where each imports kfed from, its Python, its libraries.

Runs small tasks over every core of the application and reports, per executor (its working directory, which
names its worker and executor on a standalone cluster): the Python running its tasks, the file the
``kfed`` source was imported from (the shipped archive, see ``spark_pipeline/archive.py``) and the versions of
the libraries the source needs there. Exits 1 when an executor cannot import the source or lacks a library.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from spark_pipeline.archive import EXECUTOR_REQUIREMENTS

from .common import parser, session

TASKS_PER_CORE = 4
"""Enough tasks that every executor of the application gets some (Spark offers tasks to all free cores)."""


def run(spark: Any) -> list[dict[str, Any]]:
    """One report per distinct executor: ``cwd``, ``python``, ``kfed`` (the source's file) or ``error``,
    ``versions`` (requirement -> version, None when missing)."""
    requirements = EXECUTOR_REQUIREMENTS

    # Nested, so cloudpickle ships it by value: it runs even where kfed cannot be imported, to say so.
    def probe(_: Iterator[Any]) -> Iterator[dict[str, Any]]:
        import importlib.metadata
        import os
        import sys

        report: dict[str, Any] = {"cwd": os.getcwd(), "python": sys.executable}
        try:
            import spark_pipeline.source as source

            report["kfed"] = source.__file__
        except Exception as e:
            report["error"] = f"{type(e).__name__}: {e}"
        versions: dict[str, str | None] = {}
        for name in requirements:
            try:
                versions[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                versions[name] = None
        report["versions"] = versions
        yield report

    sc = spark.sparkContext
    tasks = max(2, sc.defaultParallelism) * TASKS_PER_CORE
    reports = sc.parallelize(range(tasks), tasks).mapPartitions(probe).collect()
    unique = {(r["cwd"], r["python"], r.get("kfed"), r.get("error")): r for r in reports}
    return [unique[k] for k in sorted(unique, key=lambda k: tuple(str(x) for x in k))]


def main(argv: list[str] | None = None) -> int:
    p = parser("check", __doc__.splitlines()[0] if __doc__ else "", kafka=False, layers=False)
    args = p.parse_args(argv)
    reports = run(session("kfed-check", args.master, args.conf))
    bad = 0
    for r in reports:
        missing = [name for name, version in r["versions"].items() if version is None]
        ok = "error" not in r and not missing
        bad += not ok
        libraries = ", ".join(f"{name} {version or 'MISSING'}" for name, version in r["versions"].items())
        print(
            f"executor in {r['cwd']}: {'OK' if ok else 'FAILED'}\n  python: {r['python']}\n"
            f"  kfed source: {r.get('kfed') or r.get('error')}\n  libraries: {libraries}"
        )
    print(f"check: {len(reports)} executor(s), {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

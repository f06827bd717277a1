"""The application file for spark-submit: ``spark-submit [options] spark_pipeline/submit.py NAME [job options]``.

spark-submit runs a Python application from a file, not a module; this file runs the job NAME exactly as
``python -m spark_pipeline.jobs.NAME`` does. The driver imports the jobs from the installed kfed (or from the
``--py-files`` archive, which comes first on its path); the executors from that archive.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

# Python put this file's folder first on the path: the package's module names (plan, source, options...)
# would shadow top-level modules of the same name. The jobs are imported as the package's modules instead.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

from spark_pipeline.jobs import JOBS  # after the path fix above


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in JOBS:
        print(
            f"usage: spark-submit [options] {__file__} NAME [job options]\n  NAME: one of {', '.join(JOBS)}; "
            "NAME --help for its options",
            file=sys.stderr,
        )
        return 2
    return int(importlib.import_module(f"spark_pipeline.jobs.{argv[0]}").main(argv[1:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

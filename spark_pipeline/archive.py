"""The code archive Spark executors import kfed from: a zip of the packages the ``kfed`` source's tasks and the
jobs import, handed to Spark as a Python file (``spark-submit --py-files``, or ``SparkContext.addPyFile``).

Why ship the code with each application instead of installing kfed on the workers: a task runs the source's
code on what the driver planned with its own code (a pickled ``KfedPartition``, an offset in the checkpoint's
format). Shipped, the executors run exactly the driver's version, and nothing is redeployed on the workers when
kfed changes. Executors put the archive ahead of their site-packages, so it wins over any installed kfed too.

What a zip cannot carry are compiled libraries: the workers' Python needs ``EXECUTOR_REQUIREMENTS`` installed
(as any PySpark cluster needs pyarrow for Arrow). kfed's own C modules stay out, since Python loads no extension
module from a zip. Each has a Python fallback, and tasks do not use them.

Built once per content: the file name carries a hash of every file in it, so an unchanged tree reuses the
archive and a changed one gets a new name. (Spark keys shipped files by name: within an application, a second
file of the same name would be ignored.)

``python -m spark_pipeline.archive`` builds it if needed and prints its path, for ``--py-files "$(...)"``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

ARCHIVE_PACKAGES: Final = ("spark_pipeline", "metadata_log", "metadata_client", "sdk")
"""kfed's packages executors import: the source and jobs, the metadata log's core and client library the source
plans with, and the SDK, whose ``sdk.brokers`` asks a broker which kind it is (its C module is not shipped: the
SDK's Python fallback is what an executor gets, and the source does not use it)."""
EXECUTOR_REQUIREMENTS: Final = ("pyspark", "pyarrow", "confluent-kafka", "httpx", "msgpack")
"""What the workers' Python must have installed (the source's imports outside kfed)."""
ARCHIVE_PREFIX: Final = "kfed-spark-"
CACHE_ENV: Final = "KFED_SPARK_CACHE"
_ZIP_TIME: Final = (1980, 1, 1, 0, 0, 0)  # fixed entry times: the same files always make the same bytes


def cache_dir() -> Path:
    """Where archives are kept: ``$KFED_SPARK_CACHE``, else ``$XDG_CACHE_HOME/kfed/spark`` (``~/.cache``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kfed" / "spark"


def _sources() -> Iterator[tuple[str, Path]]:
    """(name in the archive, file) of every Python source of ``ARCHIVE_PACKAGES``, in a fixed order."""
    for package in ARCHIVE_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(f"kfed package {package} is not importable: cannot build the executors' archive")
        root = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" not in path.parts:
                yield f"{package}/{path.relative_to(root).as_posix()}", path


def build_archive(directory: Path | None = None) -> Path:
    """The archive of the current sources, built into ``directory`` (default ``cache_dir()``) unless there."""
    files = [(name, path.read_bytes()) for name, path in _sources()]
    digest = hashlib.sha256()
    for name, data in files:
        digest.update(name.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    directory = directory or cache_dir()
    target = directory / f"{ARCHIVE_PREFIX}{digest.hexdigest()[:20]}.zip"
    if target.is_file():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".{target.name}.{os.getpid()}.tmp"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files:
            zf.writestr(zipfile.ZipInfo(name, _ZIP_TIME), data, zipfile.ZIP_DEFLATED)
    os.replace(partial, target)  # atomic: a concurrent build of the same content writes the same bytes
    return target


def is_archive(path: str) -> bool:
    """Whether a Spark Python-file path is a kfed archive (of any version)."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name.startswith(ARCHIVE_PREFIX) and name.endswith(".zip")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m spark_pipeline.archive",
        description="Build (once per content) the zip of kfed's code that Spark executors import, and print its "
        'path: spark-submit --py-files "$(python -m spark_pipeline.archive)" ...',
    )
    p.add_argument("--dir", type=Path, help=f"where to keep it (default ${CACHE_ENV}, else ~/.cache/kfed/spark)")
    print(build_archive(p.parse_args(argv).dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a cluster application is given, checked by the processes that take it: an interpreter importing the
source from the code archive alone, and the spark-submit entry file run as spark-submit runs it. The archive's
content and the jobs' options are pure: ``tests/unit/spark_pipeline/test_archive.py`` and ``test_jobs.py``."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

from spark_pipeline import archive
from tests.spark.cluster import SUBMIT_FILE


def test_the_source_imports_from_the_archive_alone(tmp_path: Path) -> None:
    """An interpreter without site processing (so without kfed's editable install), given the archive and the
    third-party libraries, imports the source (and everything it imports) from the archive."""
    zip_path = archive.build_archive(tmp_path / "cache")
    code = (
        "import sys; sys.path[:0] = [sys.argv[1]]; sys.path.append(sys.argv[2]); "
        "import spark_pipeline.source as s, metadata_client.follower as f; print(s.__file__); print(f.__file__)"
    )
    done = subprocess.run([sys.executable, "-S", "-c", code, str(zip_path), sysconfig.get_path("purelib")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [f"{zip_path}/spark_pipeline/source.py", f"{zip_path}/metadata_client/follower.py"]


def test_the_submit_file_names_the_jobs_when_given_none(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SUBMIT_FILE)], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 2
    assert "ods_ingest" in done.stderr and "check" in done.stderr

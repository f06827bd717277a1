"""What a cluster application is given, without a cluster: the code archive, the spark-submit entry file, and
the jobs' options for a cluster (their ``--conf``, the warehouse as a URI, the long-running ingest's interval)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from spark_pipeline import archive
from spark_pipeline.jobs import ods_ingest
from spark_pipeline.jobs.common import layer, parser, warehouse_root
from tests.spark.cluster import SUBMIT_FILE


def test_the_archive_is_built_once_per_content_and_holds_only_python_sources(tmp_path: Path) -> None:
    first = archive.build_archive(tmp_path)
    assert archive.is_archive(str(first)) and first.parent == tmp_path
    again = archive.build_archive(tmp_path)
    assert again == first and again.read_bytes() == first.read_bytes()
    names = zipfile.ZipFile(first).namelist()
    assert "spark_pipeline/source.py" in names and "metadata_log/follower.py" in names
    assert all(n.endswith(".py") and "__pycache__" not in n for n in names)
    assert [p.name for p in tmp_path.iterdir()] == [first.name], "no partial file is left behind"


def test_other_content_gets_another_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    both = archive.build_archive(tmp_path)
    monkeypatch.setattr(archive, "ARCHIVE_PACKAGES", ("spark_pipeline",))
    one = archive.build_archive(tmp_path)
    assert one != both and "metadata_log/codec.py" not in zipfile.ZipFile(one).namelist()


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
    assert done.stdout.split() == [f"{zip_path}/spark_pipeline/source.py", f"{zip_path}/metadata_log/follower.py"]


def test_the_submit_file_names_the_jobs_when_given_none(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SUBMIT_FILE)], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 2
    assert "ods_ingest" in done.stderr and "check" in done.stderr


def test_a_warehouse_uri_is_kept_and_a_path_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert layer("s3a://bucket/kfed/", "ods", "T") == "s3a://bucket/kfed/ods/T"
    assert layer("hdfs://nn:8020/w", "_checkpoints/ods", "T") == "hdfs://nn:8020/w/_checkpoints/ods/T"
    assert warehouse_root("var/warehouse") == str(tmp_path / "var" / "warehouse")
    assert layer(tmp_path, "dwd", "T") == f"{tmp_path}/dwd/T"


def test_spark_settings_are_given_as_key_value(capsys: pytest.CaptureFixture[str]) -> None:
    p = parser("job", "")
    args = p.parse_args(["--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=2"])
    assert args.conf == [("spark.executor.memory", "512m"), ("spark.cores.max", "2")]
    with pytest.raises(SystemExit):
        p.parse_args(["--conf", "executor.memory"])
    assert "--conf" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "seconds"), [("10s", 10.0), ("500ms", 0.5), ("2m", 120.0), ("1.5", 1.5)])
def test_trigger_intervals_are_durations(text: str, seconds: float) -> None:
    assert ods_ingest.trigger_interval(text) == seconds


@pytest.mark.parametrize("bad", ["0s", "soon", "-1s", "10x"])
def test_a_bad_trigger_interval_is_refused_naming_the_option(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        ods_ingest.main(["--trigger-interval", bad])
    assert e.value.code == 2
    assert "--trigger-interval" in capsys.readouterr().err

"""The jobs' options for a cluster (``spark_pipeline/jobs``): their ``--conf``, the warehouse as a URI, the
long-running ingest's interval."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_pipeline.jobs import ods_ingest
from spark_pipeline.jobs.common import layer, parser, warehouse_root


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

"""The pipeline on a real Spark standalone cluster: a master and 2 workers (``deploy/spark.py``) next to the
federation of conftest.py, the jobs submitted as Spark users submit them.

The executors run a Python that has kfed's dependencies but not kfed (``cluster.worker_python``): every task
imports the kfed source from the archive its application ships, or fails. The tests share one cluster; the
last one kills one of its workers.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F

from deploy.launcher import LocalFederation
from deploy.spark import MARKER_ENV, SparkCluster, pids_with_env
from spark_pipeline.archive import build_archive
from spark_pipeline.events import ensure_topic, produce_events
from spark_pipeline.jobs import audit, dwd_clean, dws_aggregate, ods_ingest

from .cluster import (
    SMALL_JVMS,
    Driver,
    application_id,
    base_env,
    confs,
    spark_submit,
    wait_until,
    worker_python,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with SparkCluster(tmp_path_factory.mktemp("spark-cluster"), 2, worker_memory="512m") as c:
        yield c
    assert pids_with_env(MARKER_ENV, c.token) == [], "a process of the stopped cluster is still running"


@pytest.fixture(scope="module")
def shipping(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(the executors' Python, the archive cache, the archive of this code)."""
    root = tmp_path_factory.mktemp("shipping")
    cache = root / "cache"
    return worker_python(root / "worker-venv"), cache, build_archive(cache)


def controllers(fed: LocalFederation) -> str:
    return ",".join(fed.quorum.urls)


def access_args(fed: LocalFederation) -> list[str]:
    return ["--controllers", controllers(fed), *fed.quorum.token_args]


def ran_on_both_workers(cluster: SparkCluster, app_id: str) -> None:
    """The master's JSON API lists the application as finished with the cores of both workers, and each
    worker's lists a finished executor of it. A worker moves its executor to the finished ones only once the
    process it kills has exited, a few seconds after the driver returned on a busy machine, so that is waited for."""
    apps = {a["id"]: a for a in cluster.state()["completedapps"]}
    assert app_id in apps, f"{app_id} not among the master's completed applications: {sorted(apps)}"
    assert apps[app_id]["state"] == "FINISHED" and apps[app_id]["cores"] == 2, apps[app_id]

    def finished_on(index: int) -> bool:
        return app_id in {e["appid"] for e in cluster.worker_state(index)["finishedexecutors"]}

    for w in cluster.workers:
        wait_until(partial(finished_on, w.index), 60, f"a finished executor of {app_id} on worker {w.index}")


def test_the_executors_import_kfed_from_the_shipped_archive_on_both_workers(
    cluster: SparkCluster, shipping: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    python, cache, archive = shipping
    alone = subprocess.run([str(python), "-c", "import spark_pipeline"], cwd=tmp_path, capture_output=True, text=True)
    assert "No module named 'spark_pipeline'" in alone.stderr, "the executors' Python must not find kfed by itself"

    done = spark_submit(cluster.master_url, archive, python, "check", [], base_env(cache), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    executors = re.findall(r"executor in (\S+): OK\n  python: (\S+)\n  kfed source: (\S+)", done.stdout)
    assert len(executors) == 2, done.stdout
    workers = {w.work_dir for w in cluster.workers}
    assert {next(d for d in workers if Path(cwd).is_relative_to(d)) for cwd, _, _ in executors} == workers
    for _, executor_python, source in executors:
        assert executor_python == str(python)
        assert source.endswith(f"{archive.name}/spark_pipeline/source.py"), source
    ran_on_both_workers(cluster, application_id(done.stdout))


def counts_printed(stdout: str) -> dict[str, int]:
    return {layer: int(n) for layer, n in re.findall(r"^(ODS|DWD|DWS|AUDIT): +(\d+)", stdout, re.MULTILINE)}


def test_the_demo_pipeline_submitted_to_the_cluster_gives_the_counts_of_local_mode(
    spark: Any, fed: LocalFederation, cluster: SparkCluster, shipping: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    python, cache, archive = shipping
    topic = "T_cluster_demo"
    ensure_topic(controllers(fed), topic, partitions_per_cluster=2, access=fed.quorum.access)
    ensure_topic(controllers(fed), f"{topic}.audit", access=fed.quorum.access)
    produce_events(controllers(fed), topic, 2000, producer_id="cluster", audit_topic=f"{topic}.audit",
                   resend_every=100)  # fmt: skip

    args = ["--produce", "0", "--topic", topic, "--warehouse", str(tmp_path / "cluster"), *access_args(fed)]
    done = spark_submit(cluster.master_url, archive, python, "demo", args, base_env(cache), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    on_cluster = counts_printed(done.stdout)

    local = tmp_path / "local"
    ods_ingest.run(spark, controllers(fed), topic, local)
    in_local_mode = {
        "ODS": spark.read.parquet(str(local / "ods" / topic)).count(),
        "DWD": dwd_clean.run(spark, topic, local),
        "DWS": dws_aggregate.run(spark, topic, local),
        "AUDIT": len(audit.run(spark, controllers(fed), topic, f"{topic}.audit", local)),
    }
    assert in_local_mode == {"ODS": 2020, "DWD": 2000, "DWS": in_local_mode["DWS"], "AUDIT": 0}
    assert on_cluster == in_local_mode
    dws = [sorted(map(tuple, spark.read.parquet(str(root / "dws" / topic)).collect()))
           for root in (local, tmp_path / "cluster")]  # fmt: skip
    assert dws[0] == dws[1], "the same aggregates, row for row"
    ran_on_both_workers(cluster, application_id(done.stdout))


# -- a long-running ODS stream under faults -------------------------------------------------------------------
PHASE = 800
"""Events produced per phase; each phase's seqs start at a multiple of 10,000, so ids never collide."""
PER_TRIGGER = 400
TOPIC = "T_cluster_stream"


def produce_phase(fed: LocalFederation, phase: int) -> set[str]:
    """``PHASE`` events of the phase (and their audit records); their ids."""
    first = phase * 10_000
    produce_events(controllers(fed), TOPIC, PHASE, producer_id="stream", first_seq=first,
                   audit_topic=f"{TOPIC}.audit", seed=phase)  # fmt: skip
    return {f"stream-{seq:09d}" for seq in range(first, first + PHASE)}


def ods_rows(spark: Any, warehouse: Path) -> int:
    """Rows the ODS table holds as Spark's readers see it (the files of committed micro-batches)."""
    try:
        return int(spark.read.parquet(str(warehouse / "ods" / TOPIC)).count())
    except AnalysisException as e:  # no directory, or no committed file yet
        if "PATH_NOT_FOUND" in str(e) or "UNABLE_TO_INFER_SCHEMA" in str(e):
            return 0
        raise


@pytest.fixture
def drivers() -> Iterator[list[Driver]]:
    started: list[Driver] = []
    yield started
    left = [pid for d in started for pid in d.clean_up()]
    assert left == [], "processes of a driver outlived it"


def test_a_long_running_ods_stream_survives_a_worker_kill_a_driver_kill_and_topic_changes_exactly_once(
    spark: Any,
    fed: LocalFederation,
    cluster: SparkCluster,
    shipping: tuple[Path, Path, Path],
    drivers: list[Driver],
    tmp_path: Path,
) -> None:
    python, cache, _ = shipping
    ensure_topic(controllers(fed), TOPIC, partitions_per_cluster=2, access=fed.quorum.access)  # P0, P1 c1; P2, P3 c2
    ensure_topic(controllers(fed), f"{TOPIC}.audit", access=fed.quorum.access)
    warehouse = tmp_path / "warehouse"
    env = base_env(cache, PYSPARK_PYTHON=str(python))  # `kfed pipeline` ships the archive itself
    job = ["-m", "spark_pipeline.jobs.ods_ingest", "--master", cluster.master_url, "--topic", TOPIC,
           "--warehouse", str(warehouse), *access_args(fed), "--trigger-interval", "1s",
           "--max-offsets-per-trigger", str(PER_TRIGGER), *confs(*SMALL_JVMS)]  # fmt: skip

    def start_driver(name: str) -> Driver:
        drivers.append(Driver(job, env, tmp_path, name))
        return drivers[-1]

    produced = produce_phase(fed, 0)
    first = start_driver("driver-a")
    wait_until(lambda: ods_rows(spark, warehouse) > 0, 600, "a first micro-batch", first)
    app_a = application_id(first.errors())
    for w in cluster.workers:
        assert app_a in {e["appid"] for e in cluster.worker_state(w.index)["executors"]}, f"no executor on {w.index}"

    produced |= produce_phase(fed, 1)
    cluster.kill_worker(1)  # mid-stream: its executor dies with it, its tasks are run again on worker 2
    wait_until(lambda: len(cluster.alive_workers()) == 1, 60, "the master to drop worker 1")
    wait_until(lambda: ods_rows(spark, warehouse) >= 2 * PHASE, 600, "both phases, on worker 2 alone", first)

    with fed.quorum.controller_client() as client:  # scale-up: 2 partitions on c2 in a new physical topic
        added = client.post(f"/v1/topics/{TOPIC}/partitions",
                            {"cluster_id": "c2", "count": 2, "physical_topic": f"{TOPIC}_b"})  # fmt: skip
    fed.wait_writable(TOPIC, min_offset=added["offset"])
    produced |= produce_phase(fed, 2)
    wait_until(lambda: ods_rows(spark, warehouse) >= 3 * PHASE, 600, "the phase over 6 partitions", first)

    produced |= produce_phase(fed, 3)
    wait_until(lambda: ods_rows(spark, warehouse) > 3 * PHASE, 600, "a batch of phase 3", first)
    first.kill()  # kill -9 of the driver (Python and JVM), most likely with a micro-batch in flight
    second = start_driver("driver-b")  # the same command: it goes on from the checkpoint

    with fed.quorum.controller_client() as client:  # scale-down: P0 and P4 go read_only
        client.post(f"/v1/topics/{TOPIC}/shrink", {"partitions": [0, 4]})
    produced |= produce_phase(fed, 4)
    wait_until(lambda: ods_rows(spark, warehouse) >= 5 * PHASE, 600, "every phase", second)
    assert second.terminate() == 0, second.errors()[-4000:]
    assert "ods_ingest: stopped;" in second.output()

    ods = spark.read.parquet(str(warehouse / "ods" / TOPIC))
    rows = ods.select(F.get_json_object("value", "$.id").alias("id"), "partition", "offset").collect()
    ids = [r["id"] for r in rows]
    assert len(ids) == len(produced) == 5 * PHASE, "each message once: none lost, none twice"
    assert set(ids) == produced
    assert len({(r["partition"], r["offset"]) for r in rows}) == len(rows)
    assert {4, 5} <= {r["partition"] for r in rows}, "the partitions added while it ran were read"
    assert audit.run(spark, controllers(fed), TOPIC, f"{TOPIC}.audit", warehouse, events_from="ods") == []
    assert audit.run(spark, controllers(fed), TOPIC, f"{TOPIC}.audit", None) == []

    apps = [a for a in cluster.state()["completedapps"] if a["name"] == "kfed-ods_ingest"]
    assert {app_a, application_id(second.errors())} <= {a["id"] for a in apps}

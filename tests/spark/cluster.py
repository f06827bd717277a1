"""What the Spark-cluster tests share (no fixtures: those are in test_cluster.py): a Python for the executors
that cannot import kfed by itself, spark-submit, and job drivers run as processes the tests can kill.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import sysconfig
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import spark_pipeline
from deploy.spark import pids_with_env, spark_home

SUBMIT_FILE = Path(spark_pipeline.__file__).parent / "submit.py"
DRIVER_MARKER_ENV = "KFED_TEST_SPARK_DRIVER"
SMALL_JVMS = ("spark.executor.memory=512m", "spark.driver.memory=512m")
"""Executors fit the workers' 512m; the driver's JVM needs no more for these sizes either."""


def worker_python(directory: Path) -> Path:
    """A Python for the executors with kfed's dependencies but not kfed: a venv of this interpreter whose only
    addition is a path file naming this venv's site-packages. Python adds a path file's directories to
    ``sys.path`` without processing the path files inside them, so the editable install of kfed (itself a path
    file in site-packages) is not seen: the executors can import kfed only from what an application ships."""
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(directory)], check=True)  # type: ignore[attr-defined]
    python = directory / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    Path(site, "kfed-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python


def base_env(cache: Path, **extra: str) -> dict[str, str]:
    """The environment of a driver: loopback Spark, the archive cache, and no PYTHONPATH to leak kfed through."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_")) and k != "PYTHONPATH"}
    return {**env, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1", "KFED_SPARK_CACHE": str(cache),
            **extra}  # fmt: skip


def confs(*settings: str) -> list[str]:
    return [arg for setting in settings for arg in ("--conf", setting)]


def spark_submit(
    master: str, archive: Path, python: Path, job: str, job_args: Sequence[str], env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    """``spark-submit`` of a kfed job as the README says, the executors (and the driver's Python workers) on
    ``python``; the driver's own Python is this interpreter, where kfed is installed."""
    args = [str(spark_home() / "bin" / "spark-submit"), "--master", master, "--py-files", str(archive),
            *confs(f"spark.pyspark.python={python}", f"spark.pyspark.driver.python={sys.executable}", *SMALL_JVMS),
            str(SUBMIT_FILE), job, *job_args]  # fmt: skip
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)


def application_id(output: str) -> str:
    """The application id a job prints (stderr) when it runs on a cluster (``jobs/common.py`` ``session``).
    spark-submit passes its Python's stderr on to its stdout."""
    match = re.search(r"Spark application (app-\S+) on spark://", output)
    assert match, f"no application id in the job's output: {output[-3000:]}"
    return match.group(1)


class Driver:
    """A job's driver as its own process group (the Python driver and its JVM), output to files."""

    def __init__(self, args: Sequence[str], env: dict[str, str], cwd: Path, name: str) -> None:
        self.marker = uuid.uuid4().hex
        self.out_path, self.err_path = cwd / f"{name}.out", cwd / f"{name}.err"
        out: IO[bytes] = open(self.out_path, "wb")  # noqa: SIM115 - owned by the child
        err: IO[bytes] = open(self.err_path, "wb")  # noqa: SIM115 - owned by the child
        try:
            self.proc = subprocess.Popen([sys.executable, *args], env={**env, DRIVER_MARKER_ENV: self.marker},
                                         cwd=cwd, stdout=out, stderr=err, start_new_session=True)  # fmt: skip
        finally:
            out.close()
            err.close()

    def output(self) -> str:
        return self.out_path.read_text()

    def errors(self) -> str:
        return self.err_path.read_text()

    def kill(self) -> None:
        """kill -9 of the whole driver: the Python process and the JVM it started."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def terminate(self, timeout_s: float = 120) -> int:
        """SIGTERM to the Python driver only, as a supervisor stops it; its exit status."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def leftovers(self) -> list[int]:
        """Live processes this driver started (its JVM, its Python workers), by the marker they inherited."""
        return pids_with_env(DRIVER_MARKER_ENV, self.marker)

    def clean_up(self, timeout_s: float = 30) -> list[int]:
        """Kill the driver and whatever it started; the PIDs still alive after ``timeout_s`` (none expected).
        The Python workers of its JVM sit in process groups of their own and exit when the JVM is gone."""
        self.kill()
        deadline = time.monotonic() + timeout_s
        while (left := self.leftovers()) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        return left


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str, driver: Driver | None = None) -> Any:
    """The first truthy value of ``predicate`` (polled every second); fails the test when none comes within
    ``timeout_s`` or when ``driver`` exits meanwhile."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if driver is not None and driver.proc.poll() is not None:
            raise AssertionError(
                f"the driver exited ({driver.proc.returncode}) before {what}: {driver.errors()[-4000:]}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(1)

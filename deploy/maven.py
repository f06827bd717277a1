"""Java jars from Maven Central in a cache outside git: the Apache Kafka broker, and Spark's Kafka connector.

Each set is a pom under ``deploy/kafka/`` whose runtime dependencies ``mvn dependency:copy-dependencies``
copies into ``<cache>/libs`` (``~/.cache/kfed/<name>-<version>``; ``$KFED_KAFKA_HOME`` moves the broker's).
``make kafka`` runs ``python -m deploy.maven install kafka spark-connector``. Installing is idempotent and
offline once Maven's own repository (~/.m2) holds the jars; when Maven fails, the error says what failed
and how to retry.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from metadata_log.errors import InvalidSetting

POMS: Final = Path(__file__).parent / "kafka"


class JarsNotInstalled(InvalidSetting, RuntimeError):
    """A set of jars is not in the cache, or fetching it failed; the message says how to install it."""


@dataclass(frozen=True, slots=True)
class JarSet:
    """One pom's runtime jars and where they are cached."""

    key: str  # the name ``python -m deploy.maven install`` takes
    title: str  # what it is, for messages
    pom: Path
    version_property: str  # the pom property that pins the version
    proof: str  # a file name pattern present in every complete copy
    home_env: str | None = None  # an environment variable that moves the cache

    def version(self) -> str:
        match = re.search(rf"<{re.escape(self.version_property)}>([^<]+)</", self.pom.read_text())
        if match is None:
            raise JarsNotInstalled(f"{self.pom} has no <{self.version_property}>")
        return match.group(1)

    def home(self) -> Path:
        configured = os.environ.get(self.home_env) if self.home_env else None
        return Path(configured) if configured else Path.home() / ".cache" / "kfed" / f"{self.key}-{self.version()}"

    @property
    def install_command(self) -> str:
        return f"make kafka (or: python -m deploy.maven install {self.key})"

    def installed(self) -> Path:
        """The directory of the installed jars; ``JarsNotInstalled`` (saying how to install) when missing."""
        home = self.home()
        if not _stamp(home).is_file() or not any((home / "libs").glob(self.proof)):
            raise JarsNotInstalled(
                f"{self.title} {self.version()} is not installed in {home}: run {self.install_command} "
                "(Maven fetches it from Maven Central once)"
            )
        return home / "libs"

    def install(self) -> Path:
        """Copy the jars from Maven (its local repository first: offline once cached) into the cache.

        Nothing happens when the cache holds the jars of the current pom. The jars are copied into a fresh
        directory and moved into place, so a failed or concurrent install never leaves half a set."""
        home, wanted = self.home(), self.pom.read_text()
        stamp, libs = _stamp(home), home / "libs"
        if stamp.is_file() and stamp.read_text() == wanted and any(libs.glob(self.proof)):
            stamp.touch()  # newer than the pom: make's stamp target is satisfied
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise JarsNotInstalled(f"Maven (mvn) is not installed: apt-get install maven, then {self.install_command}")
        home.mkdir(parents=True, exist_ok=True)
        staging = home / f"libs.partial-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        goal = [
            "-q",
            "-B",
            "-Dstyle.color=never",
            "-f",
            str(self.pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}",
        ]
        result = subprocess.run([mvn, "-o", *goal], capture_output=True, text=True)
        if result.returncode != 0:  # online; -U retries what an earlier attempt failed to fetch (Maven caches that)
            result = subprocess.run([mvn, "-U", *goal], capture_output=True, text=True)
        if result.returncode != 0 or not any(staging.glob(self.proof)):
            shutil.rmtree(staging, ignore_errors=True)
            raise JarsNotInstalled(
                f"fetching {self.title} {self.version()} from Maven Central failed (mvn exit {result.returncode}):\n  "
                + "\n  ".join(_errors(result.stdout + result.stderr))
                + f"\nRetry with: {self.install_command}. What Maven fetched stays in ~/.m2, so a retry resumes; "
                f"for Maven's whole output: mvn -f {self.pom} dependency:copy-dependencies -DoutputDirectory=/tmp/jars"
            )
        old = home / f"libs.old-{os.getpid()}"
        if libs.exists():
            libs.rename(old)
        staging.rename(libs)
        shutil.rmtree(old, ignore_errors=True)
        stamp.write_text(wanted)
        return libs


def _stamp(home: Path) -> Path:
    return home / ".installed-stamp"


def _errors(output: str) -> list[str]:
    """Maven's own error lines, without its standard advice."""
    lines = output.replace("\x1b[0m", "").strip().splitlines()
    advice = ("-e switch", "-X switch", "For more information", "cwiki.apache.org")
    errors = [
        line.removesuffix(" -> [Help 1]")
        for line in lines
        if line.startswith("[ERROR] ") and line[8:].strip() and not any(a in line for a in advice)
    ]
    return errors[:3] or lines[-6:]


KAFKA_BROKER: Final = JarSet(
    "kafka", "Apache Kafka", POMS / "pom.xml", "kafka.version", "kafka_2.13-*.jar", home_env="KFED_KAFKA_HOME"
)
SPARK_KAFKA_CONNECTOR: Final = JarSet(
    "spark-connector",
    "Spark's Kafka connector (spark-sql-kafka-0-10)",
    POMS / "spark-connector" / "pom.xml",
    "spark.version",
    "spark-sql-kafka-0-10_2.13-*.jar",
)
JAR_SETS: Final = {s.key: s for s in (KAFKA_BROKER, SPARK_KAFKA_CONNECTOR)}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m deploy.maven install [kafka] [spark-connector]``: fetch jar sets into the cache."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "install" or not set(args[1:]) <= set(JAR_SETS):
        print(f"usage: python -m deploy.maven install [{'] ['.join(JAR_SETS)}]   (default: kafka)", file=sys.stderr)
        return 2
    for key in args[1:] or ["kafka"]:
        jars = JAR_SETS[key]
        try:
            libs = jars.install()
        except JarsNotInstalled as e:
            print(f"kfed: {e}", file=sys.stderr)
            return 1
        print(f"{jars.title} {jars.version()}: {libs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

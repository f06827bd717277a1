"""Rules of the test suite itself, checked by running pytest on a small file under the project's settings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]


def test_a_thread_that_dies_of_an_exception_fails_the_test_it_ran_in(tmp_path: Path) -> None:
    (tmp_path / "test_dies.py").write_text(
        "import threading\n\n\ndef test_a_producer_thread_dies():\n"
        "    thread = threading.Thread(target=lambda: 1 / 0)\n    thread.start()\n    thread.join()\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(PROJECT / "pyproject.toml"),
         "--rootdir", str(tmp_path), str(tmp_path / "test_dies.py")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout
    assert "1 failed" in result.stdout and "ZeroDivisionError" in result.stdout

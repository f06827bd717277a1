"""The code archive a cluster application is given (``spark_pipeline/archive.py``): built once per content, only
Python sources. That an interpreter imports the source from it alone is ``tests/spark/test_shipping.py``."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from spark_pipeline import archive


def test_the_archive_is_built_once_per_content_and_holds_only_python_sources(tmp_path: Path) -> None:
    first = archive.build_archive(tmp_path)
    assert archive.is_archive(str(first)) and first.parent == tmp_path
    again = archive.build_archive(tmp_path)
    assert again == first and again.read_bytes() == first.read_bytes()
    names = zipfile.ZipFile(first).namelist()
    assert "spark_pipeline/source.py" in names and "metadata_client/follower.py" in names
    assert all(n.endswith(".py") and "__pycache__" not in n for n in names)
    assert [p.name for p in tmp_path.iterdir()] == [first.name], "no partial file is left behind"


def test_other_content_gets_another_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    both = archive.build_archive(tmp_path)
    monkeypatch.setattr(archive, "ARCHIVE_PACKAGES", ("spark_pipeline",))
    one = archive.build_archive(tmp_path)
    assert one != both and "metadata_log/codec.py" not in zipfile.ZipFile(one).namelist()

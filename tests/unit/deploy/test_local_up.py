"""``kfed local up`` and ``kfed local cluster add`` refuse bad settings (``deploy/local_up.py``) before starting
anything. Running them as a person does is ``tests/integration/test_local_up.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from kfed.cli import main as kfed


def test_bad_settings_are_refused_before_anything_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert kfed(["local", "up", "--data-dir", str(tmp_path), "--broker", "tansu", "--brokers-per-cluster", "3"]) == 2
    assert "--brokers-per-cluster" in capsys.readouterr().err
    assert kfed(["local", "up", "--data-dir", str(tmp_path), "--clusters", "99"]) == 2
    assert "--clusters" in capsys.readouterr().err
    assert kfed(["local", "up", "--data-dir", str(tmp_path), "--spark-workers", "-1"]) == 2
    assert "--spark-workers" in capsys.readouterr().err
    assert kfed(["local", "cluster", "add", "c3", "--data-dir", str(tmp_path)]) == 2
    assert "no `kfed local up` is running" in capsys.readouterr().err
    assert kfed(["local", "cluster", "add", "../c3", "--data-dir", str(tmp_path)]) == 2
    assert "CLUSTER_ID" in capsys.readouterr().err
    assert not (tmp_path / "quorum").exists()

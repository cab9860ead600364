"""A non-editable install works from any working directory (conf/ and sweeps/ in the wheel)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import cli
from rlexp.base.runtime import environment  # os.environ copied safely from other threads

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_ships_config_and_runs_from_elsewhere(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels),
                    str(ROOT)], check=True, timeout=300)
    wheel = next(wheels.glob("rlexp-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "rlexp/conf/config.yaml" in names and "rlexp/conf/algo/gspo.yaml" in names
    assert any(n.startswith("rlexp/sweeps/") for n in names)
    assert any(n.startswith("hydra_plugins/rlexp_xpk_launcher/") for n in names)
    assert "hydra_plugins/__init__.py" not in names  # namespace package, or plugins vanish
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheel)], check=True, timeout=300)
    elsewhere = tmp_path / "somewhere"
    elsewhere.mkdir()
    env = {**environment(), "PYTHONPATH": str(target)}
    proc = cli("--cfg", "job", "algo=gspo", cwd=elsewhere, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "name: gspo" in proc.stdout
    probe = subprocess.run([sys.executable, "-c", "import rlexp.config.paths as p; print(p.conf_dir())"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    assert str(target) in probe.stdout

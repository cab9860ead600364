"""A real single-node SLURM cluster for tests (started by .ci/slurm.sh when it is not up).

Import the `slurm` fixture into a test module (`from slurm_fixture import slurm`). A test that
needs SLURM is skipped only where SLURM cannot be installed, and never in CI: with CI=true a
cluster that cannot be started is a failure, with the script's own error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import require

ROOT = Path(__file__).resolve().parents[1]
SETUP = ROOT / ".ci" / "slurm.sh"


def slurm_problem() -> str | None:
    """None when sbatch can reach a controller with a usable node, else why not."""
    if shutil.which("sbatch") is None:
        return "sbatch not installed"
    try:
        proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True,
                              timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sinfo: {exc}"
    states = proc.stdout.split()
    if proc.returncode != 0:
        return f"sinfo: {proc.stderr.strip() or proc.returncode}"
    if not any(s.startswith(("idle", "mixed", "alloc")) for s in states):
        return f"no usable node (states: {states or 'none'})"
    return None


def ensure_slurm() -> str | None:
    """Start (and if needed install) the cluster; None when it is up, else the error."""
    problem = slurm_problem()
    if problem is None:
        return None
    if os.geteuid() != 0:
        return f"{problem}; and not root, so .ci/slurm.sh cannot start it"
    proc = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return f"{problem}; .ci/slurm.sh exited {proc.returncode}: {' | '.join(tail)}"
    return slurm_problem()


@pytest.fixture(scope="session")
def slurm() -> None:
    problem = ensure_slurm()
    require(problem is None, f"no SLURM here: {problem}", "bash scripts/setup --test")

"""On an accelerator (marker `accelerator`, left out of the README's test command): the default
tiny run on the GPU or TPU at hand, bf16 compute, to its end with a finite loss and a summary.

CPU-only machines deselect it (`-m "not accelerator"`); run it where a device exists with
`python -m pytest -m accelerator`. bench/ holds the accelerator's figures (step time, memory
plan against the measured peak); this test only proves the path runs there.
"""

from __future__ import annotations

import json
import math

import pytest

from conftest import require
from helpers import cli

pytestmark = pytest.mark.accelerator


def _platform() -> str:
    import jax

    return jax.devices()[0].platform


def test_the_default_run_trains_on_the_accelerator_in_bf16(tmp_path):
    platform = _platform()
    require(platform in ("gpu", "tpu"), f"no GPU or TPU here (JAX sees {platform})",
            "a machine with an accelerator and jax[cuda12] or jax[tpu]")
    hardware = "gpu" if platform == "gpu" else "v5p-8"
    proc = cli(f"hardware={hardware}", "model.dtype=bfloat16", "train.steps=4", "eval.every=0",
               "tracker=none", cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summaries = list((tmp_path / "outputs" / "runs").rglob("summary.json"))
    assert len(summaries) == 1
    summary = json.loads(summaries[0].read_text())
    assert summary["status"] == "FINISHED"
    assert summary["devices"] >= 1 and summary["steps_done"] == 4
    assert math.isfinite(summary["eval_after"]["eval/accuracy"])

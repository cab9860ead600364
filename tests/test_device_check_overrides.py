"""The override lists bench/device_check.sh's parts build on a device pass pre-flight: a device
is lent rarely and for minutes, so a list the CLI would refuse must fail here first. Pre-flight
refuses a key given twice, and the benches' bases set keys that each shape sets again; the memory
plan, which refuses a run that does not fit, is computed on the CPU for the GPU's profile."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from rlexp.planning.plan import make_plan

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture()
def bench(monkeypatch):
    """bench(name) -> bench/<name>.py imported as a module (bench/ on sys.path, as the scripts
    put it there for each other)."""
    monkeypatch.syspath_prepend(str(BENCH))

    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, module)  # its dataclasses look their module up
        spec.loader.exec_module(module)
        return module

    return load


def shape(cfg_overrides: list[str]) -> dict[str, str]:
    return dict(o.split("=", 1) for o in cfg_overrides)


@pytest.mark.parametrize("platform,dry", [("gpu", False), ("cpu", True)])
def test_the_memory_shapes_pass_pre_flight(bench, platform, dry):
    """Part 2, bench/memory_calibration.py --shapes, for a GPU and for the CPU dry path: each
    shape keeps its own batch sizes (the base's train.micro_batch_size=null, then the shape's,
    was refused: 2 of its 3 shapes failed)."""
    mem = bench("memory_calibration")
    runs = mem.shape_runs(platform, dry, ["run.cache_dir=/tmp/x"])
    assert list(runs) == list(mem.SHAPES)
    for name, overrides in runs.items():
        cfg = mem.compose(mem.merged(overrides, mem.ENGINE_ONLY))
        assert cfg.hardware.name == ("cpu" if dry else "gpu"), name
        assert cfg.model.name == ("tiny" if dry else "smollm2-135m"), name
        want = shape(mem.SHAPES[name])
        assert cfg.train.batch_size == int(want["train.batch_size"]), name
        micro = want.get("train.micro_batch_size")
        assert cfg.train.micro_batch_size == (int(micro) if micro else None), name
        assert str(cfg.run.cache_dir) == "/tmp/x" and cfg.tracker.name == "none", name
        assert make_plan(cfg).fits, (name, make_plan(cfg).why)  # the CLI's plan lets it run


def test_the_rollout_shapes_pass_pre_flight(bench):
    """Part 4, bench/accelerator.py --batch-sizes 8,16,32,64 on a GPU (the largest and the
    smallest here): each size replaces the base's train.batch_size=8 (both were given, and
    refused), and the micro-batch the plan picks is one the shape fits."""
    acc = bench("accelerator")
    gpu = "h200"
    for prompts in (16, 64):
        overrides = acc.shape_overrides(acc.gpu_base(gpu), prompts, micro_given=False)
        cfg = acc.compose(overrides)
        assert cfg.hardware.name == "gpu" and cfg.hardware.gpu_type == gpu
        assert cfg.train.batch_size == prompts and cfg.rollout.micro_batch_size == prompts
        assert cfg.model.name == "smollm2-135m" and cfg.tracker.name == "none"
        assert 1 <= cfg.train.micro_batch_size <= prompts
        assert make_plan(cfg).fits, (prompts, make_plan(cfg).why)
    # a micro-batch on the command line is kept, not planned
    given = acc.shape_overrides(acc.merged(acc.gpu_base(gpu), ["train.micro_batch_size=2"]), 8,
                                micro_given=True)
    assert acc.compose(given).train.micro_batch_size == 2

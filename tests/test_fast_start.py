"""RLEXP_FAST_START=0, the one off-switch of rlexp's start-up shortcuts (read by
rlexp.base.runtime.fast_start_enabled): each shortcut stands down, and a sweep still runs.

Fast: what each layer's door does with the switch off (in-process, a toy Hydra app). Slow: a
real joblib sweep of `python -m rlexp` with the switch off, its children under one parent.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest

from rlexp.base import runtime
from sweep_helpers import (TINY, explain, finished_sweep, only_sweep_dir, rlexp, toy_reports,
                           write_toy_app)

OFF = {runtime.FAST_START_ENV: "0"}


@pytest.fixture()
def switched_off(monkeypatch):
    monkeypatch.setenv(runtime.FAST_START_ENV, "0")


@pytest.mark.parametrize("value,enabled", [(None, True), ("1", True), ("0", False),
                                           ("false", False), (" Off ", False), ("no", False)])
def test_the_switch_reads_the_environment_each_time(value, enabled, monkeypatch):
    if value is None:
        monkeypatch.delenv(runtime.FAST_START_ENV, raising=False)
    else:
        monkeypatch.setenv(runtime.FAST_START_ENV, value)
    assert runtime.fast_start_enabled() is enabled


def test_off_the_collector_is_left_alone(switched_off):
    assert gc.isenabled() and gc.get_freeze_count() == 0
    with runtime.frozen_heap():
        with runtime.loading():
            assert gc.isenabled()
        with runtime.loading(freeze=True):
            pass
        assert gc.get_freeze_count() == 0
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_off_exit_now_is_a_plain_exit(switched_off):
    with pytest.raises(SystemExit) as exc:
        runtime.exit_now(3)
    assert exc.value.code == 3


def test_off_no_fork_server_or_warm_up_starts(switched_off, monkeypatch):
    from hydra_plugins.rlexp_presets import joblib_launcher

    from rlexp.launch import fast_start

    started = []
    monkeypatch.setattr(joblib_launcher, "start_fork_server", lambda: started.append("server"))
    monkeypatch.setattr(joblib_launcher, "start_warm_up", lambda *a: started.append("warm-up"))
    argv = ["-m", "hydra/launcher=joblib", "train.seed=0,1"]
    assert fast_start.launches_joblib(argv)
    fast_start.start_fork_server_early(argv)
    target = "hydra_plugins.rlexp_presets.joblib_launcher.RlexpJoblibLauncher"
    fast_start.start_workers({"_target_": target, "n_jobs": 2}, [])
    assert started == []
    monkeypatch.delenv(runtime.FAST_START_ENV)
    fast_start.start_fork_server_early(argv)
    assert started == ["server"]


def test_off_the_basic_sweeper_composes_every_job(switched_off, monkeypatch):
    """Jobs pre-flight checked are validated by Hydra again (here: its validation asserts,
    having no config loader), and pre-flight composes each job in full."""
    from hydra_plugins.rlexp_presets.sweeper import RlexpBasicSweeper

    batch = [["train.seed=0"], ["train.seed=1"]]
    monkeypatch.setattr(runtime, "_checked_jobs", set())
    runtime.note_checked_jobs(batch)
    assert not runtime.all_checked(batch)
    sweeper = RlexpBasicSweeper(max_batch_size=None)
    sweeper.config, sweeper.hydra_context, sweeper.config_loader = None, None, None
    with pytest.raises(AssertionError):
        sweeper.validate_batch_is_legal(batch)
    monkeypatch.delenv(runtime.FAST_START_ENV)
    assert runtime.all_checked(batch)
    sweeper.validate_batch_is_legal(batch)  # on: nothing composed


def test_off_pre_flight_composes_every_job_in_full(switched_off, monkeypatch, tmp_path):
    from rlexp.launch import preflight

    monkeypatch.chdir(tmp_path)

    composed = []
    real = preflight.JobComposer.compose

    def counting(self, overrides):
        composed.append(self.reuse)
        return real(self, overrides)

    monkeypatch.setattr(preflight.JobComposer, "compose", counting)
    off = preflight.preflight(["-m", "train.seed=0,1,2", "run.dry_run=true"])
    assert composed == [False] * 3
    monkeypatch.delenv(runtime.FAST_START_ENV)
    on = preflight.preflight(["-m", "train.seed=0,1,2", "run.dry_run=true"])
    assert off.jobs == on.jobs and [j.train.seed for j in on.jobs] == [0, 1, 2]


def test_off_tunix_runs_its_own_init():
    """With the switch off, rlexp.engine leaves the tunix package to Python's import (its
    __init__.py runs on the first import); on, it is made without running it."""
    code = "import sys, rlexp.engine; print('tunix' in sys.modules)"
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        env={**os.environ, runtime.FAST_START_ENV: "1"})
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, **OFF})
    assert on.stdout.strip() == "True", on.stderr[-2000:]
    assert off.stdout.strip() == "False", off.stderr[-2000:]


def test_off_a_joblib_sweep_runs_on_the_plugins_own_launcher(tmp_path):
    """A toy app's joblib sweep (rlexp's launcher with the switch off: no warm-up, Hydra's
    execute_job as it is): every job runs and the failing one is reported."""
    app = write_toy_app(tmp_path, {"a": {"fail": "false"}, "b": {"fail": "true"},
                                   "c": {"fail": "false"}})
    args = [sys.executable, str(app), "-m", "hardware=a,b,c", "hydra/launcher=joblib",
            f"hydra.sweep.dir={tmp_path}/sweep", "fail=${hardware.fail}"]
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", **OFF}
    proc = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 1, explain(proc)
    assert "job b asked to fail" in proc.stderr
    assert set(toy_reports(tmp_path / "sweep")) == {"a", "b", "c"}


@pytest.mark.slow
def test_a_real_sweep_with_every_shortcut_off(tmp_path):
    """`python -m rlexp -m hydra/launcher=joblib` with RLEXP_FAST_START=0: both jobs finish,
    each an MLflow child of the sweep's parent run, with the values it was given."""
    proc = rlexp(["-m", "hydra/launcher=joblib", "train.seed=0,1", *TINY], tmp_path, env=OFF)
    assert proc.returncode == 0, explain(proc)
    sweep_dir = only_sweep_dir(tmp_path)
    assert finished_sweep(sweep_dir, lambda r: int(r.data.params["train.seed"])) == [0, 1]

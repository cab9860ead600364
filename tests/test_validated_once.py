"""Each config-only rule runs once per job: pre-flight validates every job of a launch and
hands their digests to the jobs (rlexp.config.convert.VETTED_ENV); a job whose config is one
of them is not validated again, and any other config is."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from rlexp.base.errors import UserError
from rlexp.config import convert
from rlexp.config.paths import conf_dir
from rlexp.base.runtime import environment  # os.environ copied safely from other threads


def _composed(*overrides):
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(str(conf_dir()), version_base="1.3"):
            return compose("config", overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()


@pytest.fixture()
def validations(monkeypatch):
    """The calls of rlexp.config.validate.validate made through to_config (the real one runs)."""
    calls = []
    real = convert.validate

    def counted(cfg):
        calls.append(cfg)
        return real(cfg)

    monkeypatch.setattr(convert, "validate", counted)
    monkeypatch.delenv(convert.VETTED_ENV, raising=False)
    return calls


def test_a_vetted_config_is_not_validated_again(validations, monkeypatch):
    composed = _composed("algo.beta=0.02")
    vetted = convert.to_config(composed)
    assert len(validations) == 1
    monkeypatch.setenv(convert.VETTED_ENV, f"0123456789abcdef {convert.config_digest(vetted)}")
    again = convert.to_config(composed)
    assert len(validations) == 1 and again == vetted


def test_any_other_config_is_validated(validations, monkeypatch):
    vetted = convert.to_config(_composed())
    monkeypatch.setenv(convert.VETTED_ENV, convert.config_digest(vetted))
    convert.to_config(_composed("algo.beta=0.02"))
    assert len(validations) == 2
    with pytest.raises(UserError, match="algo.kl_estimator"):
        convert.to_config(_composed("algo.kl_estimator=k9"))


def test_a_config_validate_changes_is_validated_in_the_job(validations, monkeypatch):
    """train.epochs: validate derives train.steps, so the job's config before validation is
    not the vetted one; the job validates it and gets the same steps."""
    composed = _composed("train.epochs=2")
    vetted = convert.to_config(composed)
    monkeypatch.setenv(convert.VETTED_ENV, convert.config_digest(vetted))
    again = convert.to_config(composed)
    assert len(validations) == 2 and again.train.steps == vetted.train.steps


# The job of `python -m rlexp` (Hydra's real launch after the real pre-flight), with training
# replaced by a line reporting how many validations the process made.
HARNESS = """
import json, os, runpy, sys
from rlexp.config import convert
from rlexp.job import experiment
from rlexp.launch import preflight

calls, real = [], convert.validate
convert.validate = lambda cfg: calls.append(1) or real(cfg)
if os.environ.get("FORGET_VETTED"):  # as a job started without this pre-flight
    before = preflight.before_launch
    preflight.before_launch = lambda pre: (before(pre), os.environ.pop(convert.VETTED_ENV))
experiment.run = lambda cfg, job: print(json.dumps({"validations": len(calls)})) or 0.0
sys.argv = ["rlexp", *sys.argv[1:]]
runpy.run_module("rlexp", run_name="__main__")
"""


@pytest.mark.parametrize("forget,expected", [(False, 1), (True, 2)])
def test_python_m_rlexp_validates_its_job_once(tmp_path, forget, expected):
    env = {**environment(), "FORGET_VETTED": "1" if forget else ""}
    env.pop(convert.VETTED_ENV, None)
    proc = subprocess.run([sys.executable, "-c", HARNESS, f"hydra.run.dir={tmp_path / 'run'}",
                           "tracker=none"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    assert json.loads(lines[-1]) == {"validations": expected}

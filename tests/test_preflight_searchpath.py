"""Pre-flight composes through Hydra's public API (initialize_config_dir + compose, with
--config-dir as a `hydra.searchpath` entry) exactly what `python -m rlexp` composes through
Hydra's main: the same files win where a user's config dir and the packaged conf/ both hold
one, a command's own `hydra.searchpath` and a primary config of the user's dir keep working,
and a sweep's jobs composed from an earlier one equal their full compose."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from helpers import cli
from rlexp.config.convert import to_config
from rlexp.config.schema import Config
from rlexp.launch.preflight import JobComposer, preflight, quote_override, with_config_dir


@pytest.mark.parametrize("value", ["file:///tmp/a b", "file:///tmp/it's", "back\\slash",
                                   "end\\", "a\\'b", "", "pkg://x.y", "f,[p]=$ ${x}"])
def test_a_quoted_value_parses_back_to_itself(value):
    override = OverridesParser.create().parse_override(f"k=[{quote_override(value)},x]")
    assert override.value() == [value, "x"]


def test_the_config_dir_comes_first_in_hydra_searchpath():
    assert with_config_dir(["a.b=1"], None, ["file:///own"]) == ["a.b=1"]
    assert with_config_dir(["a.b=1"], "file:///cd", ["file:///own"]) == \
        ["a.b=1", "hydra.searchpath=['file:///cd','file:///own']"]
    # the command's own hydra.searchpath replaces the primary config's, in place
    assert with_config_dir(["hydra.searchpath=[pkg://x]", "a.b=1"], "file:///cd", ["file:///own"]) \
        == ["hydra.searchpath=['file:///cd','pkg://x']", "a.b=1"]
    # not a list: left for Hydra's own error
    assert with_config_dir(["hydra.searchpath=x"], "file:///cd", []) == ["hydra.searchpath=x"]


@pytest.fixture
def user(tmp_path: Path) -> Path:
    """conf/ (a config dir: its own model, and an experiment named like a packaged one) and
    extra/ (a search path entry with an experiment of its own)."""
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "model").mkdir()
    (tmp_path / "extra" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "quick.yaml").write_text(
        "# @package _global_\ntrain:\n  steps: 99\n")
    (tmp_path / "conf" / "model" / "mytiny.yaml").write_text("name: mytiny\nnum_layers: 1\n")
    (tmp_path / "conf" / "model" / "mytiny2.yaml").write_text("name: mytiny2\nnum_layers: 2\n")
    (tmp_path / "extra" / "experiment" / "other.yaml").write_text(
        "# @package _global_\neval:\n  every: 7\n")
    (tmp_path / "conf" / "myconfig.yaml").write_text(
        f"defaults:\n  - config\n  - _self_\nhydra:\n  searchpath:\n"
        f"    - file://{tmp_path / 'extra'}\ntrain:\n  seed: 5\n")
    return tmp_path


def _as_hydra_main(argv: list[str], cwd: Path):
    """The job config `python -m rlexp --cfg job ARGV` prints, typed."""
    proc = cli("--cfg", "job", *argv, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return to_config(OmegaConf.merge(OmegaConf.structured(Config), OmegaConf.create(proc.stdout)))


@pytest.mark.parametrize("argv", [
    # a packaged experiment/quick.yaml comes first, as in Hydra's main; model from the dir,
    # experiment from the command's hydra.searchpath
    ["--config-dir", "{u}/conf", "hydra.searchpath=[file://{u}/extra]", "model=mytiny",
     "experiment=quick"],
    # the user's primary config, with its own hydra.searchpath
    ["--config-dir", "{u}/conf", "--config-name", "myconfig", "experiment=other"],
], ids=["config-dir+searchpath", "primary-in-config-dir"])
def test_preflight_composes_what_python_m_rlexp_composes(user, argv):
    argv = [a.format(u=user) for a in argv]
    (job,) = preflight(argv).jobs
    assert job == _as_hydra_main(argv, user)
    assert job.train.steps != 99 or "quick" not in argv[-1]  # the packaged quick.yaml won


def test_a_sweep_over_a_group_of_a_searchpath_dir_composes_each_choice(user, monkeypatch):
    """A group only a `hydra.searchpath` entry holds is a group choice too (composed in full),
    not a plain value set on the job before."""
    argv = ["-m", f"hydra.searchpath=[file://{user}/conf]", "model=mytiny,mytiny2",
            "train.seed=1,2", "run.dry_run=true"]
    fast = preflight(argv)
    assert sorted((j.model.name, j.train.seed) for j in fast.jobs) == \
        [("mytiny", 1), ("mytiny", 2), ("mytiny2", 1), ("mytiny2", 2)]
    monkeypatch.setattr(JobComposer, "reuse", False)
    assert preflight(argv).jobs == fast.jobs

"""The one-line on-policy warning: GSPO, epsilon or epsilon_high chosen at num_iterations=1
(the importance ratio is exactly 1, so they change nothing), from the command line or an
experiment file, in a dry run as in a run (rlexp.launch.preflight.warn_noop)."""

from __future__ import annotations

import pytest

from helpers import cli, said
from rlexp.job import guards
from rlexp.launch.preflight import preflight

HUB_8B = "model.path=meta-llama/Llama-3.1-8B-Instruct"


def test_a_dry_run_of_an_experiment_file_that_selects_gspo_on_policy_warns(tmp_path):
    proc = cli("experiment=maxtext_llama3.1-8b_gspo", HUB_8B, "run.dry_run=true", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = said(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("rlexp: warning: algo.num_iterations=1"), lines
    assert "algo.name=gspo" in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "outputs").exists() or not any((tmp_path / "outputs").rglob("*.db"))


@pytest.mark.parametrize("argv, named", [
    (["experiment=maxtext_llama3.1-8b_gspo", HUB_8B], ["algo.name=gspo"]),
    (["experiment=maxtext_llama3.1-8b_grpo", HUB_8B], None),  # epsilon 0.2 is the default's
    (["algo=gspo", "algo.num_iterations=1"], ["algo.epsilon=0.0003", "algo.epsilon_high=0.0004",
                                             "algo.name=gspo"]),
    (["algo=gspo"], None),  # gspo.yaml takes 2 updates per rollout: the ratio acts
    (["algo=dapo", "algo.num_iterations=1"], ["algo.epsilon_high=0.28"]),  # not algo.name
    (["algo.epsilon_high=0.3"], ["algo.epsilon_high=0.3"]),
    (["algo.ratio_level=sequence"], ["algo.ratio_level=sequence"]),
    (["algo.beta=0.1"], None),
])
def test_the_rule_names_what_was_chosen(argv, named):
    pre = preflight([*argv, "run.dry_run=true"])
    line = guards.noop_warning(pre.jobs, pre.overrides, pre.swept, pre.multirun)
    if named is None:
        assert line is None, line
    else:
        assert line is not None and "\n" not in line
        assert line.split(" so ")[1].split(" change")[0].split(", ") == named, line

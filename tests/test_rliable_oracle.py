"""rliable's aggregates in rlexp.tracking.seed_stats against rliable 1.2.0's own functions
(Agarwal et al. 2021): the interquartile mean and the probability of improvement exactly, and
their stratified-bootstrap CIs to Monte Carlo precision; then the lines a sweep over three
tasks prints."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import require
from rlexp.tracking import compare, seed_stats

# rliable 1.2.0 runs in a venv of its own (scripts/setup: it needs arch < 8, which fails to
# import beside this environment's pandas 3).
RLIABLE_PYTHON = Path(os.environ.get("RLEXP_RLIABLE_VENV", "/opt/rlexp-rliable")) / "bin" / \
    "python"

# Final accuracies over 64 prompts (k/64: ties, as real ones have) of two configurations, 10
# and 8 seeds x 3 tasks.
RNG = np.random.default_rng(5)
X = RNG.binomial(64, [0.30, 0.55, 0.70], size=(10, 3)) / 64
Y = RNG.binomial(64, [0.27, 0.52, 0.71], size=(8, 3)) / 64
# Resamples of rliable's bootstrap (a Python loop over arch: ~2 ms each).
REPS = 2000
# What rliable computes on X and Y, printed as JSON.
ORACLE = f"""
import json, sys
import numpy as np
from rliable import library as rly, metrics
x, y = (np.array(a) for a in json.load(sys.stdin))
ci = {{}}
for name, func, scores in [("iqm", metrics.aggregate_iqm, x),
                           ("poi", metrics.probability_of_improvement, [x, y])]:
    np.random.seed(0)  # rliable's StratifiedBootstrap draws from NumPy's global generator
    _, est = rly.get_interval_estimates({{"k": scores}}, lambda *s: np.array([func(*s)]),
                                        reps={REPS})
    ci[name] = [float(est["k"][0, 0]), float(est["k"][1, 0])]
print(json.dumps({{"iqm": [metrics.aggregate_iqm(s) for s in (x, y, x[:, :1], x[:7])],
                   "poi": [metrics.probability_of_improvement(x, y),
                           metrics.probability_of_improvement(x, x)], "ci": ci}}))
"""


@pytest.fixture(scope="module")
def rliable() -> dict:
    require(RLIABLE_PYTHON.is_file(), f"no rliable venv at {RLIABLE_PYTHON.parent.parent}",
            "bash scripts/setup --test")
    proc = subprocess.run([str(RLIABLE_PYTHON), "-c", ORACLE], capture_output=True, text=True,
                          input=json.dumps([X.tolist(), Y.tolist()]), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_point_estimates_are_rliables(rliable):
    ours = [seed_stats.iqm(s) for s in (X, Y, X[:, :1], X[:7])]
    assert ours == pytest.approx(rliable["iqm"], abs=1e-12)
    assert [seed_stats.probability_of_improvement(X, Y),
            seed_stats.probability_of_improvement(X, X)] == pytest.approx(rliable["poi"],
                                                                          abs=1e-12)


@pytest.mark.slow  # with the point estimates: one run of rliable in its venv (~12 s)
@pytest.mark.parametrize("which", ["iqm", "poi"])
def test_stratified_bootstrap_cis_are_rliables(rliable, which):
    ours = (seed_stats.stratified_bootstrap_ci(seed_stats.iqm, X) if which == "iqm" else
            seed_stats.stratified_bootstrap_ci(seed_stats.probability_of_improvement, X, Y))
    ref = rliable["ci"][which]
    # both Monte Carlo (9999 and 2000 resamples): the bounds agree to 10% of the width
    assert ours == pytest.approx(ref, abs=0.1 * (ref[1] - ref[0]))


def test_a_sweep_over_two_tasks_prints_the_iqm_and_p_of_improvement():
    rows = [compare.Row(name=f"{algo}-{task}-{seed}", run_id=None, status="FINISHED",
                        values={"algo": algo, "dataset": task, "train.seed": str(seed)},
                        final_accuracy=float(scores[seed, t]))
            for algo, scores in (("grpo", Y), ("gspo", X[:8]))
            for t, task in enumerate(("gsm8k", "math", "countdown")) for seed in range(8)]
    groups = compare.group_rows(rows, ["algo", "dataset", "train.seed"])
    baseline = next(g for g in groups if g.values["algo"] == "grpo")
    lines = compare.aggregate_lines(groups, baseline)
    assert "IQM" in lines[0] and "3 tasks" in lines[0] and "8 seeds" in lines[0], lines
    gspo = next(line for line in lines if line.strip().startswith("gspo"))
    iqm = seed_stats.iqm(X[:8])
    assert f"{iqm:.3f}" in gspo and "P(gspo > grpo) = " \
        f"{seed_stats.probability_of_improvement(X[:8], Y):.2f}" in gspo
    assert all(len(line) <= compare.WIDTH for line in "\n".join(lines).splitlines())

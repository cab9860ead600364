"""Statistics over seeds (rlexp.tracking.seed_stats) against scipy.stats, and the seed groups
of a sweep dir as `python -m rlexp.report` prints them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from rlexp.tracking import compare, seed_stats
from rlexp.tracking.report import main, report

# Final accuracies of two configurations on the same five seeds (fixed data).
GRPO = np.array([0.31, 0.28, 0.35, 0.30, 0.26])
GSPO = np.array([0.36, 0.27, 0.40, 0.33, 0.31])


def scipy_paired(a, b):
    """scipy's paired t-test of b - a: (p, CI low, CI high)."""
    res = stats.ttest_rel(b, a)
    ci = res.confidence_interval(0.95)
    return res.pvalue, ci.low, ci.high


def scipy_ci(x) -> tuple[float, float]:
    ci = stats.ttest_1samp(x, 0).confidence_interval(0.95)
    return ci.low, ci.high


@pytest.mark.parametrize("x", [GRPO, GSPO - GRPO, np.array([0.1, 0.5, 0.2]),
                               np.random.default_rng(7).normal(0.3, 0.05, 12)])
def test_t_interval_is_scipys(x):
    found = seed_stats.summarize(x)
    assert (found.low, found.high) == pytest.approx(scipy_ci(x), abs=1e-12)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_paired_difference_is_scipys_paired_t_test(n):
    a, b = GRPO[:n], GSPO[:n]
    pair = seed_stats.paired_difference(dict(enumerate(a)), dict(enumerate(b)))
    assert (pair.p, pair.low, pair.high) == pytest.approx(scipy_paired(a, b), abs=1e-12)


def test_band_is_the_t_interval_of_each_step():
    x = np.random.default_rng(3).normal(0.3, 0.05, (4, 6))
    _, low, high, _ = seed_stats.t_columns(x)
    for step in range(6):
        assert (low[step], high[step]) == pytest.approx(scipy_ci(x[:, step]), abs=1e-12)


def test_holm_is_statsmodels_step_down():
    # multipletests([...], method="holm")[1] of statsmodels 0.14
    assert seed_stats.holm([0.01, 0.04, 0.03, 0.2]) == pytest.approx([0.04, 0.09, 0.09, 0.2])
    assert seed_stats.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    assert seed_stats.holm([]) == []


def test_a_clear_difference_is_beyond_noise_and_a_null_one_is_not():
    rng = np.random.default_rng(0)
    a = rng.normal(0.3, 0.05, 10)
    clear = seed_stats.paired_difference(dict(enumerate(a)),
                                         dict(enumerate(a + 0.05 + rng.normal(0, 0.01, 10))))
    assert clear.p < 1e-4 and seed_stats.verdict(clear) == "beyond seed noise"
    noise = seed_stats.paired_difference(dict(enumerate(a)),
                                         dict(enumerate(a + rng.normal(0, 0.05, 10))))
    assert noise.p > 0.05 and seed_stats.verdict(noise) == "not distinguishable from seed noise"
    assert noise.low < 0 < noise.high  # the interval agrees with the verdict
    # among several comparisons, Holm's p decides whether it survives them
    several = seed_stats.with_holm([clear, noise, clear])
    assert [p.comparisons for p in several] == [3, 3, 3]
    assert several[1].holm == pytest.approx(noise.p)  # the largest p: times 1
    assert several[0].holm == several[2].holm == pytest.approx(3 * clear.p)
    marginal = seed_stats.Paired(n=3, mean=0.05, low=0.001, high=0.1, p=0.04, holm=0.08,
                                 comparisons=2)
    assert seed_stats.verdict(marginal) == ("beyond seed noise alone, not after Holm's "
                                            "correction for 2")


def test_pairs_are_matched_by_seed_not_by_order():
    a = {"seed=0": 0.1, "seed=1": 0.5, "seed=2": 0.3}
    b = {"seed=2": 0.35, "seed=0": 0.15, "seed=1": 0.55, "seed=9": 0.9}  # seed 9: no pair
    pair = seed_stats.paired_difference(a, b)
    assert pair.n == 3 and pair.mean == pytest.approx(0.05)
    assert pair.low == pytest.approx(0.05) and pair.high == pytest.approx(0.05)


def test_summary_has_sample_std_and_one_seed_has_no_interval():
    s = seed_stats.summarize(GRPO)
    assert s.n == 5 and s.mean == pytest.approx(GRPO.mean())
    assert s.std == pytest.approx(np.std(GRPO, ddof=1))
    one = seed_stats.summarize([0.4])
    assert one.n == 1 and np.isnan(one.low) and np.isnan(one.std)
    pair = seed_stats.paired_difference({"s": 0.1}, {"s": 0.2})
    assert pair.n == 1 and pair.p == 1.0 and seed_stats.verdict(pair).startswith("one seed")


# ------------------------------------------------------------------------------ a sweep dir

ALGOS = ("grpo", "gspo")
SEEDS = (0, 1, 2)


def accuracy(algo: str, seed: int) -> float:
    return round(0.25 + 0.04 * seed + (0.03 if algo == "gspo" else 0.0) + 0.01 * (seed == 1
                 and algo == "gspo"), 4)


def fabricated_sweep(root: Path) -> Path:
    """The shape a `-m algo=grpo,gspo train.seed=0,1,2` sweep leaves with tracker=none: one
    summary.json a job, and the swept keys."""
    sweep_dir = root / "sweep"
    for i, (algo, seed) in enumerate((a, s) for a in ALGOS for s in SEEDS):
        job = sweep_dir / f"{i}"
        job.mkdir(parents=True)
        (job / "summary.json").write_text(json.dumps({
            "name": f"{algo}-seed{seed}", "status": "FINISHED", "mlflow_run_id": None,
            "overrides": [f"algo={algo}", f"train.seed={seed}", "train.steps=2"],
            "steps_done": 2, "wall_s": 3.0, "eval_before": {"eval/accuracy": 0.9},
            "eval_after": {"eval/accuracy": accuracy(algo, seed)},
            "train_final": {"train/reward_mean": 1 + accuracy(algo, seed)}}))
    (sweep_dir / "swept_keys.json").write_text(json.dumps({"keys": ["algo", "train.seed"]}))
    return sweep_dir


NUMBER = r"[-+]?\d+\.\d+"


def test_report_groups_seeds_and_pairs_them_as_scipy_does(tmp_path, capsys):
    sweep_dir = fabricated_sweep(tmp_path)
    main([str(sweep_dir), "--uri", f"sqlite:///{tmp_path / 'none.db'}", "--baseline",
          "algo=grpo"])
    out = capsys.readouterr().out
    groups = {line.split()[0]: line for line in out.splitlines()
              if re.match(r"(grpo|gspo)\s+3\s", line)}
    assert set(groups) == {"grpo", "gspo"}, out
    for algo, line in groups.items():
        values = np.array([accuracy(algo, s) for s in SEEDS])
        mean, std, low, high = map(float, re.findall(NUMBER, line)[:4])  # final acc first
        assert mean == pytest.approx(values.mean(), abs=6e-4)
        assert std == pytest.approx(values.std(ddof=1), abs=6e-4)
        assert (low, high) == pytest.approx(scipy_ci(values), abs=6e-4)
        # best acc is the step-0 value (0.9) never
        assert "0.900" not in line
    paired = [line for line in out.splitlines() if line.startswith("final acc, gspo - grpo:")]
    assert len(paired) == 1, out
    a = np.array([accuracy("grpo", s) for s in SEEDS])
    b = np.array([accuracy("gspo", s) for s in SEEDS])
    diff = float(re.findall(NUMBER, paired[0])[0])
    low, high = map(float, re.findall(NUMBER, paired[0])[1:3])
    p = float(re.search(r"p = ([\d.]+)", paired[0]).group(1))
    assert diff == pytest.approx((b - a).mean(), abs=6e-4)
    ref_p, ref_low, ref_high = scipy_paired(a, b)
    assert p == pytest.approx(ref_p, rel=0.05) and (low, high) == pytest.approx(
        (ref_low, ref_high), abs=6e-4)
    assert "3 seeds: beyond seed noise" in paired[0] and low > 0
    assert "95% t-interval over seeds" in out and "p: paired t-test" in out
    assert "Holm" not in out  # one comparison: nothing to adjust


def test_the_issues_three_seeds_get_an_interval_that_agrees_with_the_verdict():
    """Per-seed differences 0.0703, 0.0625, 0.0312: the percentile bootstrap printed their
    range [+0.031, +0.070] beside "not distinguishable from seed noise"."""
    pair = seed_stats.paired_difference({0: 0.0, 1: 0.0, 2: 0.0},
                                        {0: 0.0703, 1: 0.0625, 2: 0.0312})
    assert (round(pair.low, 3), round(pair.high, 3)) == (0.003, 0.106)
    assert pair.p < 0.05 and seed_stats.verdict(pair) == "beyond seed noise"
    cell = seed_stats.summarize([0.3359, 0.3438, 0.4453])  # 0.375 ±0.061 in the issue
    assert (round(cell.low, 2), round(cell.high, 2)) == (0.22, 0.53)


def test_over_names_the_repeats_and_a_bad_baseline_is_one_line(tmp_path, capsys):
    sweep_dir = fabricated_sweep(tmp_path)
    uri = f"sqlite:///{tmp_path / 'none.db'}"
    text, _ = report(str(sweep_dir), uri=uri, over=["algo", "seed"])
    assert re.search(r"^all\s+6\s", text, re.M)  # every run one group
    with pytest.raises(SystemExit) as exc:
        main([str(sweep_dir), "--uri", uri, "--baseline", "algo=cispo"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1
    assert "'algo=cispo' matches no group; groups: 'grpo', 'gspo'" in err
    with pytest.raises(SystemExit) as exc:
        main([str(sweep_dir), "--uri", uri, "--over", "epsilon"])
    assert exc.value.code == 2 and "it varies: algo, train.seed" in capsys.readouterr().err


def test_group_curves_average_the_seeds_steps():
    rows = [compare.Row(name=f"r{s}", run_id=None, status="FINISHED",
                        values={"algo": "grpo", "train.seed": str(s)},
                        curves={compare.ACCURACY: [(0, 0.1), (2, 0.2 + s / 10), (4, 0.5)]})
            for s in range(3)]
    [group] = compare.group_rows(rows, ["algo", "train.seed"])
    curve = group.curve(compare.ACCURACY)
    assert [p[0] for p in curve] == [0, 2, 4]
    assert curve[1][1] == pytest.approx(0.3) and curve[1][2] < 0.3 < curve[1][3]
    assert group.rows[0].best_accuracy is None  # rows built by hand: no best computed
    assert compare._best([(0, 0.9), (2, 0.2), (4, 0.3)]) == 0.3  # step 0 never counts


def test_a_seed_that_finished_twice_counts_once_by_its_latest_run():
    """An experiment where seed 0 was trained again (`rlexp.report EXPERIMENT` lists runs by
    start time): the group is 3 seeds, not 4 runs. Mean, interval, curve and count all take
    seed 0's latest run, and the table and its note say one earlier run was left out."""
    def row(seed: int, acc: float) -> compare.Row:
        return compare.Row(name=f"r{seed}-{acc}", run_id=None, status="FINISHED",
                           values={"algo": "grpo", "train.seed": str(seed)}, final_accuracy=acc,
                           curves={compare.ACCURACY: [(0, 0.1), (4, acc)]})

    rows = [row(0, 0.9), row(1, 0.2), row(2, 0.3), row(0, 0.4)]  # seed 0 again, last
    [group] = compare.group_rows(rows, ["algo", "train.seed"])
    assert [r.final_accuracy for _, r in group.finished()] == [0.4, 0.2, 0.3]
    summary = group.stats("final_accuracy")
    assert summary.n == 3 and summary.mean == pytest.approx(0.3)
    assert group.curve(compare.ACCURACY)[-1][1] == pytest.approx(0.3)  # not 0.45 over 4 runs
    _, [cells] = compare.group_table([group], (("final acc", "final_accuracy"),))
    assert cells[1] == "3 (+1 earlier run)"
    assert group.repeated() == ["seed=0"]
    assert "counts by its latest run (grpo: seed=0)" in compare.table_note([group])

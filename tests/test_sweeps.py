"""Every sweep in sweeps/ composes all its jobs, at tiny size, into a valid config that fits.

Jobs are expanded with Hydra's own BasicSweeper code (params first, then the command line, so
a command-line value of a swept key replaces the file's values), and each job is composed the
way a launcher does it (`+sweep=NAME` plus the job's overrides), then validated and planned.
The Optuna sweep's search space is checked at its corners (interval ends, every choice).
"""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra import compose
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
from omegaconf import OmegaConf

from rlexp.config.convert import to_config
from rlexp.config.schema import Config
from rlexp.config.paths import sweeps_dir
from rlexp.planning.plan import make_plan
from helpers import cli

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = sorted(p.stem for p in (sweeps_dir() or ROOT / "sweeps").glob("*.yaml"))
# What every sweep promises (the list); a missing file fails here, not silently.
EXPECTED = {"beta", "epsilon", "num_generations", "grid", "grpo_vs_gspo", "seeds", "optuna"}
# Tiny size: the smallest run the schema accepts, so composing and planning stay instant.
TINY = ["train.steps=2", "train.batch_size=2", "eval.num_samples=4", "dataset.num_eval=4",
        "eval.pass_k=1"]
# Sweeps whose swept keys only act off-policy: they must set algo.num_iterations >= 2.
OFF_POLICY = {"epsilon", "grpo_vs_gspo", "grid", "optuna"}


def _sweep_config(name: str, extra: list[str] = ()):
    return compose("config", overrides=[f"+sweep={name}", *extra], return_hydra_config=True)


def _basic_jobs(params: dict, cli: list[str]) -> list[list[str]]:
    """Job override lists exactly as Hydra's BasicSweeper builds them."""
    # Unbound call: Hydra's plugin scan re-imports its core plugins, so instantiating the
    # class imported here can fail its own super() check; the method only reads .params.
    args = BasicSweeper._parse_config(SimpleNamespace(params=params)) + list(cli)
    parsed = OverridesParser.create().parse_overrides(args)
    (batch,) = BasicSweeper.split_arguments(parsed, None)
    return batch


def _corner_values(text: str) -> list[str]:
    """Representative values of an Optuna search-space entry: interval ends, every choice."""
    ov = OverridesParser.create().parse_overrides([f"k={text}"])[0]
    value = ov.value()
    if isinstance(value, IntervalSweep):
        return [repr(float(value.start)), repr(float(value.end))]
    if isinstance(value, ChoiceSweep):
        return [str(v) for v in value.list]
    if isinstance(value, RangeSweep):
        return [str(v) for v in ov.sweep_iterator()]
    return [str(value)]


def _optuna_jobs(params: dict, cli: list[str]) -> list[list[str]]:
    axes = [[f"{k}={v}" for v in _corner_values(str(t))] for k, t in params.items()]
    # One job per value (the other keys at their first value): covers every corner value.
    firsts = [a[0] for a in axes]
    jobs = [firsts[:i] + [v] + firsts[i + 1:] for i, axis in enumerate(axes) for v in axis]
    return [j + list(cli) for j in jobs]


def _compose_job(name: str, job: list[str]) -> Config:
    cfg = compose("config", overrides=[f"+sweep={name}", *job])
    config = to_config(cfg)
    plan = make_plan(config)
    assert plan.fits, f"{name} job {job} does not fit: {plan.why}"
    return config


def test_the_promised_sweeps_exist():
    assert EXPECTED <= set(SWEEPS), f"missing sweeps: {EXPECTED - set(SWEEPS)}"


@pytest.mark.parametrize("name", SWEEPS)
def test_sweep_file_shape(name):
    text = (ROOT / "sweeps" / f"{name}.yaml").read_text()
    assert text.splitlines()[0].strip() == "# @package _global_"
    # Documented: says what it compares, in comments before the YAML starts.
    head = list(itertools.takewhile(lambda ln: ln.startswith("#") or not ln.strip(),
                                    text.splitlines()[1:]))
    assert sum(1 for ln in head if ln.startswith("#")) >= 3, f"{name}.yaml: document it"
    raw = OmegaConf.create(text)
    assert raw.hydra.mode == "MULTIRUN"
    assert raw.hydra.sweeper.params, f"{name}.yaml sweeps nothing"


@pytest.mark.parametrize("name", SWEEPS)
def test_every_job_composes_at_tiny_size(name, hydra_conf):
    cfg = _sweep_config(name, TINY)
    assert str(cfg.hydra.mode) == "RunMode.MULTIRUN"
    params = {str(k): str(v) for k, v in cfg.hydra.sweeper.params.items()}
    optuna = cfg.hydra.sweeper._target_.endswith("OptunaSweeper")
    jobs = (_optuna_jobs if optuna else _basic_jobs)(params, TINY)
    assert len(jobs) >= 2
    configs = [_compose_job(name, job) for job in jobs]
    for job, config in zip(jobs, configs):
        assert config.train.steps == 2, job  # the command line's tiny size reached the job
        for override in job:
            key, value = override.split("=", 1)
            if "." in key:  # the swept value reached the job's config
                obj = config
                for part in key.split("."):
                    obj = getattr(obj, part)
                assert str(obj) == value or float(obj) == pytest.approx(float(value)), override
    if name in OFF_POLICY:
        assert all(c.algo.num_iterations >= 2 for c in configs), \
            f"{name} sweeps keys that only act off-policy: it must set algo.num_iterations>=2"


def test_basic_sweep_sizes(hydra_conf):
    sizes = {}
    for name in sorted(EXPECTED - {"optuna"}):
        cfg = _sweep_config(name)
        sizes[name] = len(_basic_jobs(dict(cfg.hydra.sweeper.params), []))
    assert sizes == {"beta": 4, "epsilon": 3, "num_generations": 3, "grid": 8,
                     "grpo_vs_gspo": 2, "seeds": 4}


def test_grid_is_the_full_product(hydra_conf):
    cfg = _sweep_config("grid")
    jobs = _basic_jobs(dict(cfg.hydra.sweeper.params), [])
    combos = {tuple(sorted(o for o in j if o.split("=")[0] in
                           ("algo.beta", "algo.epsilon", "algo.num_generations"))) for j in jobs}
    assert len(combos) == 8


def test_grpo_vs_gspo_pairs_share_seeds_and_data(hydra_conf):
    cfg = _sweep_config("grpo_vs_gspo")
    jobs = _basic_jobs(dict(cfg.hydra.sweeper.params), [])
    configs = [_compose_job("grpo_vs_gspo", j) for j in jobs]
    by_algo: dict[str, set] = {}
    for c in configs:
        by_algo.setdefault(c.algo.name, set()).add(c.train.seed)
    assert set(by_algo) == {"grpo", "gspo"}
    assert by_algo["grpo"] == by_algo["gspo"]
    assert len({(c.dataset.name, c.dataset.seed, c.dataset.num_train) for c in configs}) == 1


def test_seeds_vary_only_the_seed(hydra_conf):
    cfg = _sweep_config("seeds")
    configs = [_compose_job("seeds", j) for j in _basic_jobs(dict(cfg.hydra.sweeper.params), [])]
    assert len({c.train.seed for c in configs}) == len(configs) >= 3
    flat = [OmegaConf.to_container(OmegaConf.structured(c)) for c in configs]
    for f in flat:
        f["train"].pop("seed")
    assert all(f == flat[0] for f in flat)


def test_command_line_value_of_a_swept_key_wins(hydra_conf):
    cfg = _sweep_config("beta", ["algo.beta=0.5"])
    jobs = _basic_jobs(dict(cfg.hydra.sweeper.params), ["algo.beta=0.5"])
    assert jobs == [["algo.beta=0.5"]]
    cfg = _sweep_config("grid", ["algo.num_iterations=3"])
    jobs = _basic_jobs(dict(cfg.hydra.sweeper.params), ["algo.num_iterations=3",
                                                         "algo.beta=0.1,0.2,0.3"])
    assert len(jobs) == 3 * 2 * 2
    assert {o for j in jobs for o in j if o.startswith("algo.num_iterations")} == \
        {"algo.num_iterations=3"}


def test_optuna_sweep_maximizes_accuracy(hydra_conf):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    cfg = _sweep_config("optuna")
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper")
    assert str(sweeper.direction) == "maximize"
    assert sweeper.n_trials >= 2
    assert "algo.num_iterations" in sweeper.params


@pytest.mark.slow
def test_real_multirun_takes_the_command_line_value(tmp_path):
    """The CLI value replaces the sweep file's list, in the jobs a dry run lists (a dry run
    expands the sweep in pre-flight and launches nothing, so no dirs or MLflow runs)."""
    proc = cli("+sweep=beta", "algo.beta=0.5,0.7", "run.dry_run=true", "tracker=none",
               f"hydra.sweep.dir={tmp_path}/sweep", *TINY, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    launched = re.findall(r"#\d+ : (.*)", proc.stdout + proc.stderr)
    assert len(launched) == 2, proc.stdout + proc.stderr
    assert "algo.beta=0.5" in launched[0] and "algo.beta=0.7" in launched[1]
    assert not any("algo.beta=0.01" in ln for ln in launched)


@pytest.mark.slow
def test_optuna_sweep_maximizes_what_the_jobs_return(tmp_path):
    """Two real trials: each job returns its final eval accuracy, Optuna records the best."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    from sweep_helpers import TINY as RUN_TINY, explain, rlexp, summaries

    proc = rlexp(["+sweep=optuna", "hydra.sweeper.n_trials=2", "tracker=none", *RUN_TINY],
                 tmp_path)
    assert proc.returncode == 0, explain(proc)
    (result,) = (tmp_path / "outputs" / "sweeps").glob("*/optimization_results.yaml")
    best = OmegaConf.load(result)
    assert 0.0 <= float(best.best_value) <= 1.0
    assert set(best.best_params) >= {"algo.beta", "algo.epsilon", "train.learning_rate"}
    jobs = summaries(result.parent)  # what each trial's job returned: the best is their max
    assert len(jobs) == 2 and all(s["status"] == "FINISHED" for s in jobs.values()), jobs
    assert float(best.best_value) == pytest.approx(max(s["objective"] for s in jobs.values()))
    assert "Directions: ['maximize']" in proc.stdout + proc.stderr


# ------------------------------------------------------------------------------ labels

# Command-line sweeps besides the files (long values, two keys sharing a leaf, many keys).
CLI_SWEEPS = [["algo=grpo,gspo", "train.seed=0,1,2"],
              ["algo.beta=0,0.04", "algo.num_generations=2,4", "train.learning_rate=0.000312456"],
              ["train.seed=1,2", "dataset.seed=3,4"],
              ["algo.beta=0,0.04", "algo.epsilon=0.1,0.2", "algo.epsilon_high=0.28,0.3",
               "algo.num_iterations=1,2", "train.learning_rate=1e-5,3e-6",
               "train.batch_size=4,8"]]


def _all_jobs():
    """(what it is, swept keys, job overrides) of every job of every sweep file and CLI sweep."""
    from rlexp.tracking.conventions import swept_keys

    for name in SWEEPS:
        cfg = _sweep_config(name)
        params = OmegaConf.to_container(cfg.hydra.sweeper.params)
        keys = swept_keys([], params)
        make = _optuna_jobs if name == "optuna" else _basic_jobs
        for job in make(dict(cfg.hydra.sweeper.params), []):
            yield name, keys, job
    for sweep in CLI_SWEEPS:
        keys = swept_keys(sweep, None)
        for job in _basic_jobs({}, sweep):
            yield " ".join(sweep), keys, job


def test_one_formatter_names_every_job_the_same_everywhere(hydra_conf):
    """Run name, terminal job label, legend and group label + seed: one spelling, from
    rlexp.config.naming.label, no token cut (each is a whole key=value of the job)."""
    from rlexp.config import naming
    from rlexp.job.sweep_messages import job_label
    from rlexp.tracking import compare
    from rlexp.tracking.conventions import MAX_RUN_NAME, display_name

    checked = 0
    for what, keys, job in _all_jobs():
        values = naming.override_values(job)
        full = naming.label(values, keys)
        tokens = set(full.split(" "))
        assert all("=" in t or t == values.get(k) for t, k in
                   zip(full.split(" "), [k for k in keys if k in values])), (what, full)
        run_name = display_name(None, {}, job, keys)
        legend = compare.label(compare.Row("r", None, "FINISHED", values), keys)
        terminal = job_label(0, None, job, keys)[len("[1 "):-1]
        assert legend == terminal == full, (what, job)
        shown = run_name.split(" ")
        if len(full) <= MAX_RUN_NAME:
            assert run_name == full, (what, job)
        else:  # whole tokens, then how many were left out
            assert set(shown[:-1]) <= tokens and re.fullmatch(r"\+\d+", shown[-1]), run_name
            assert len(run_name) <= MAX_RUN_NAME
        [group] = compare.group_rows([compare.Row("r", None, "FINISHED", values)], keys)
        seed = naming.label(values, ["train.seed"])
        if "train.seed" in keys and "dataset.seed" not in keys:  # the group, then its seed
            parts = [group.label] if group.label != "all" else []
            assert sorted([*parts, seed]) == sorted(full.split(" ")), (what, job)
        checked += 1
    assert checked > 40


def test_a_long_single_run_name_keeps_whole_tokens():
    from rlexp.tracking.conventions import display_name

    choices = {"algo": "grpo", "model": "tiny", "dataset": "arithmetic", "hardware": "cpu"}
    name = display_name(None, choices, ["eval.every=3", "train.seed=1", "train.steps=6",
                                        "algo.beta=0.04", "algo.epsilon=0.3"], None)
    assert name == "β=0.04,ε=0.3,+3 (grpo-tiny-arithmetic-cpu)"


# ------------------------------------------------------------------------------ a real one

# One real sweep read by the two tests below (module-scoped: a sweep costs its jobs' start-up,
# warm starts and compiles; each test reads a different side of its output). 4 jobs under
# joblib, 2 at a time, stderr a pipe, tracked in the default MLflow store: 2 algos x 2 seeds,
# the seed key first, so the 2 concurrent jobs compile the two algos' programs side by side
# and the next two load them from the run cache. Each job: a short warm start per seed
# (formatted answers: rewards that differ per run), 4 steps of 4 prompts instead of the
# recipe's 32, evaluated before and after only (the group table and the paired difference
# read the final evaluation). The grpo jobs' inputs are test_export's run (experiment=quick at
# 8 eval prompts), and seed 0's warm start is test_multihost's and test_export's too: the
# session compiles and trains them once.
SEED_SWEEP = ["-m", "hydra/launcher=joblib", "train.seed=0,1", "algo=grpo,gspo",
              "train.steps=4", "train.batch_size=4", "eval.num_samples=8", "dataset.num_eval=8",
              "eval.pass_k=2", "model.warm_start_steps=100"]
# The jobs' labels, in launch order ([i/4 seed=S ALGO]).
SEED_JOBS = [(0, "grpo"), (0, "gspo"), (1, "grpo"), (1, "gspo")]


@pytest.fixture(scope="module")
def seed_sweep(tmp_path_factory):
    """(the finished `python -m rlexp SEED_SWEEP` process, its cwd)."""
    from sweep_helpers import rlexp

    cwd = tmp_path_factory.mktemp("seed_sweep")
    return rlexp(SEED_SWEEP, cwd=cwd, timeout=3000), cwd


@pytest.mark.slow
def test_a_real_seed_sweep_ends_with_the_group_table_the_report_prints(seed_sweep):
    """`-m algo=grpo,gspo train.seed=0,1` on the real engine: it ends with a 2-line group
    table (n=2 seeds: mean, std and t-interval) and one paired difference; rlexp.report on its
    dir prints the same lines, whose numbers are scipy's on the jobs' own final values; no
    job's before/after table reaches the sweep's output (each stays in the job's rlexp.log)."""
    import numpy as np
    from scipy import stats

    from sweep_helpers import explain, only_sweep_dir, summaries

    proc, cwd = seed_sweep
    assert proc.returncode == 0, explain(proc)
    out = proc.stdout + proc.stderr
    assert proc.stderr.splitlines()[0] == "rlexp: starting a sweep: reading the config"
    groups = [ln for ln in out.splitlines()
              if re.match(r"(grpo|gspo)\s+2\s+\d\.\d{3} ±\d\.\d{3} \[", ln)]
    assert [g.split()[0] for g in groups] == ["grpo", "gspo"], explain(proc)
    paired = [ln for ln in out.splitlines() if ln.startswith("final acc, gspo - grpo: ")]
    assert len(paired) == 1 and "2 seeds" in paired[0], explain(proc)
    assert not re.search(r"before\s+after\s+change", out)
    sweep = only_sweep_dir(cwd)
    assert all(re.search(r"before\s+after\s+change", (sweep / name / "rlexp.log").read_text())
               for name in summaries(sweep))
    report = subprocess.run([sys.executable, "-m", "rlexp.report", str(sweep)], cwd=cwd,
                            capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stderr
    assert all(line in report.stdout for line in [*groups, paired[0]]), report.stdout
    finals = {}
    for s in summaries(sweep).values():
        values = dict(o.split("=", 1) for o in s["overrides"])
        finals[(values["algo"], int(values["train.seed"]))] = s["eval_after"]["eval/accuracy"]
    assert len(finals) == 4, finals
    for line in groups:
        x = np.array([finals[(line.split()[0], seed)] for seed in (0, 1)])
        mean, std, low, high = (float(v) for v in re.findall(r"-?\d\.\d{3}", line)[:4])
        assert mean == pytest.approx(x.mean(), abs=6e-4)
        assert std == pytest.approx(x.std(ddof=1), abs=6e-4)
        half = stats.t.ppf(0.975, 1) * x.std(ddof=1) / np.sqrt(2)  # 95% t-interval, 1 dof
        assert (low, high) == (pytest.approx(x.mean() - half, abs=6e-4),
                               pytest.approx(x.mean() + half, abs=6e-4)), line
    a, b = (np.array([finals[(g, s)] for s in (0, 1)]) for g in ("grpo", "gspo"))
    if np.any(a != b) and len(set(b - a)) > 1:
        p = stats.ttest_rel(b, a).pvalue  # the paired t-test
        assert (f"p = {p:.2g}," if p >= 1e-3 else "p < 0.001,") in paired[0]
    elif np.all(a == b):  # identical finals: no difference, p = 1
        assert "+0.000" in paired[0] and "p = 1," in paired[0]


@pytest.mark.slow
def test_a_joblib_sweeps_piped_output_labels_every_job_line(seed_sweep):
    """The same sweep's console (4 jobs, 2 at a time, stderr a pipe): every step and eval line
    names its job ([2/4 seed=0 gspo]), one line per event; the launching process adds a line
    per finished job; no joblib.Parallel line, no Hydra timestamp on a job's lines; the jobs'
    before/after tables stay in their logs, and the sweep ends with one group table line per
    group. The 4 MLflow children sit under one parent, whose id the last line names."""
    from sweep_helpers import explain, finished_sweep, mlflow_children, only_sweep_dir

    proc, cwd = seed_sweep
    assert proc.returncode == 0, explain(proc)
    sweep_dir = only_sweep_dir(cwd)
    assert finished_sweep(sweep_dir, lambda r: (int(r.data.params["train.seed"]),
                                                r.data.params["algo.name"])) == sorted(SEED_JOBS)
    parent, _ = mlflow_children(sweep_dir)
    text = proc.stdout + proc.stderr
    assert "Joblib.Parallel(" not in text
    job_lines = [ln for ln in proc.stderr.splitlines()
                 if re.search(r"(step \d+/\d+:|eval @ step|accuracy  |pass@k  |mean reward  |"
                              r"before +after)", ln)]
    labels = {f"[{i}/4 seed={s} {a}]" for i, (s, a) in enumerate(SEED_JOBS, start=1)}
    assert len(job_lines) >= 4 * (4 + 2), proc.stderr  # steps, evals
    for line in job_lines:
        assert any(line.startswith(label + " ") for label in labels), line
    for label in labels:  # each job's steps and evaluations; its table is in its log
        mine = [ln for ln in job_lines if ln.startswith(label)]
        assert any("step 4/4:" in ln for ln in mine) and any("eval @ step 4" in ln for ln in mine)
        assert sum(ln.startswith(f"{label} step ") for ln in mine) == 4, mine  # one per step
        assert not any("mean reward" in ln for ln in mine), label
        assert any(ln.startswith(f"{label} rlexp: ") and "building the model" in ln
                   for ln in proc.stderr.splitlines()), label  # its start-up phases too
    groups = [ln for ln in proc.stdout.splitlines() if re.match(r"(grpo|gspo)\s+2\s", ln)]
    assert len(groups) == 2, proc.stdout  # 2 seeds each: 2 groups of 2
    assert not re.search(r"^\[\d{4}-\d\d-\d\d .*\]\[", proc.stderr, re.M)  # no Hydra stamps
    done = re.findall(r"^rlexp: sweep (\d)/4 done", proc.stderr, re.M)
    assert done == ["1", "2", "3", "4"], proc.stderr
    # the end names the parent run (its id in the store, or its UI page)
    end = [ln for ln in text.splitlines() if re.match(r"rlexp: sweep \S+: 4 runs FINISHED", ln)]
    assert len(end) == 1 and parent["run"].info.run_id in end[0], text

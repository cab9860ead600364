"""`python -m rlexp.report`: the comparison table and PNG of a sweep, a parent run, an experiment."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from rlexp.base.errors import UserError
from rlexp.base.events import RunInfo
from rlexp.tracking.report import main, report
from rlexp.tracking import parent_run_id, prepare_store, run_id
from rlexp.tracking import compare, store
from rlexp.tracking.callback import SweepCallback
from rlexp.tracking.listener import MlflowListener

BETAS = (0.0, 0.04, 0.1)


def job(uri: str, sweep_dir: Path, beta: float) -> None:
    """A sweep job as the orchestrator runs it: tracked run, then summary.json."""
    run_dir = sweep_dir / f"beta{beta}"
    listener = MlflowListener(uri, "report", run_dir, gated=False, flush_every_s=3600.0)
    listener.on_run_start(RunInfo(
        name=f"beta{beta}", run_dir=run_dir, tags={},
        params={"algo.beta": beta, "algo.name": "grpo", "train.steps": 4},
        extra={"parent_run_id": parent_run_id(sweep_dir)}))
    for step in range(1, 5):
        listener.on_metrics(step, {"train/reward_mean": step / 4 + beta})
        # accuracy peaks at step 3 for beta=0.1, so best != final there
        accuracy = 0.2 + step * beta if not (beta == 0.1 and step == 4) else 0.3
        listener.on_eval(step, {"eval/accuracy": accuracy, "eval/pass_at_k": 1 - beta}, [])
    summary = {"name": run_dir.name, "status": "FINISHED", "overrides": [f"algo.beta={beta}"],
               "steps_done": 4, "wall_s": 2.0 + beta,
               # beta=0.1's store was "down" at its end: no id, matched by its run dir
               "mlflow_run_id": run_id(run_dir) if beta != 0.1 else None,
               "eval_before": {"eval/accuracy": 0.2}, "eval_after": {"eval/accuracy": accuracy}}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    listener.on_run_end("FINISHED", summary)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> tuple[str, Path]:
    root = tmp_path_factory.mktemp("report")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    prepare_store(uri)
    sweep_dir = root / "sweeps" / "beta-sweep"
    config = OmegaConf.create({
        "tracker": {"name": "mlflow", "uri": uri, "experiment": "report"},
        "hydra": {"sweep": {"dir": str(sweep_dir)},
                  "overrides": {"task": ["algo.beta=0,0.04,0.1"]}}})
    callback = SweepCallback()
    callback.on_multirun_start(config)
    for beta in BETAS:
        job(uri, sweep_dir, beta)
    callback.on_multirun_end(config)
    return uri, sweep_dir


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.split("\n\n")[0].splitlines()[2:]]


def files(directory: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime_ns for p in directory.rglob("*") if p.is_file()}


def test_report_of_a_sweep_dir(sweep):
    uri, sweep_dir = sweep
    before = files(sweep_dir)
    text, png = report(str(sweep_dir))
    header = text.splitlines()[0].split("  ")
    assert [h.strip() for h in header if h.strip()] == [
        "run", "algo.beta", "final reward", "final acc", "best acc", "steps", "wall s", "status"]
    # ranked by final eval accuracy: 0.04 (0.36) > 0.1 (0.3) > 0 (0.2)
    assert rows(text) == [
        ["beta0.04", "0.04", "1.04", "0.36", "0.36", "4", "2", "FINISHED"],
        ["beta0.1", "0.1", "1.1", "0.3", "0.5", "4", "2.1", "FINISHED"],
        ["beta0.0", "0.0", "1", "0.2", "0.2", "4", "2", "FINISHED"]]
    # its PNGs in a directory of their own: reading a sweep changes none of its files
    assert png.parent != sweep_dir and png.read_bytes()[:4] == b"\x89PNG"
    assert files(sweep_dir) == before


def test_report_by_parent_run_id_and_metric(sweep, tmp_path, monkeypatch):
    uri, sweep_dir = sweep
    monkeypatch.chdir(tmp_path)
    parent = parent_run_id(sweep_dir)
    text, png = report(parent, uri=uri, metric="eval/pass_at_k", out=tmp_path / "plots")
    assert "final eval/pass_at_k" in text.splitlines()[0]
    assert [r[0] for r in rows(text)] == ["beta0.0", "beta0.04", "beta0.1"]  # 1.0 > 0.96 > 0.9
    assert png == tmp_path / "plots" / "comparison.png" and png.exists()
    text, _ = report(parent, uri=uri, metric="train/reward_mean", ascending=True)
    assert [r[0] for r in rows(text)] == ["beta0.0", "beta0.04", "beta0.1"]


def test_report_by_experiment_lists_runs_not_parents(sweep, tmp_path, monkeypatch):
    uri, _ = sweep
    monkeypatch.chdir(tmp_path)
    text, png = report("report", uri=uri)
    assert sorted(r[0] for r in rows(text)) == ["beta0.0", "beta0.04", "beta0.1"]
    assert png is not None and png.exists()


def test_report_of_an_untracked_sweep_reads_summaries(tmp_path):
    for beta in BETAS:
        run_dir = tmp_path / f"beta{beta}"
        run_dir.mkdir()
        (run_dir / "summary.json").write_text(json.dumps({
            "name": run_dir.name, "status": "FAILED" if beta else "FINISHED",
            "overrides": [f"algo.beta={beta}", "train.steps=2"], "steps_done": 2,
            "wall_s": 1.0, "eval_after": {"eval/accuracy": beta}, "mlflow_run_id": None,
            "train_final": {"train/reward_mean": 1 + beta}}))
    text, png = report(str(tmp_path), uri=f"sqlite:///{tmp_path / 'absent.db'}")
    assert [r[:3] + r[-1:] for r in rows(text)] == [
        ["beta0.1", "0.1", "1.1", "FAILED"], ["beta0.04", "0.04", "1.04", "FAILED"],
        ["beta0.0", "0.0", "1", "FINISHED"]]
    assert png is None  # no curves without MLflow
    assert not (tmp_path / "absent.db").exists()  # reading never creates a store


def test_cli_prints_table_and_png_path(sweep, capsys, tmp_path):
    _, sweep_dir = sweep
    main([str(sweep_dir), "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "beta0.04" in out and f"curves: {tmp_path / 'comparison.png'}" in out
    with pytest.raises(SystemExit) as exc:
        main(["no-such-experiment", "--uri", f"sqlite:///{sweep_dir.parent.parent / 'mlflow.db'}"])
    assert exc.value.code == 2
    assert "no-such-experiment" in capsys.readouterr().err


def test_sweep_summary_artifacts(sweep):
    _, sweep_dir = sweep
    markdown = (sweep_dir / "summary.md").read_text()
    assert "| run | algo.beta | final reward |" in markdown and markdown.count("| beta") == 3
    csv_lines = (sweep_dir / "summary.csv").read_text().splitlines()
    assert len(csv_lines) == 4


def test_wall_time_and_steps_agree_between_sweep_dir_and_run_id_views(sweep, tmp_path,
                                                                      monkeypatch):
    uri, sweep_dir = sweep
    monkeypatch.chdir(tmp_path)  # the run-id view writes comparison-<id>.png in the cwd
    by_dir, _ = report(str(sweep_dir))
    by_id, _ = report(parent_run_id(sweep_dir), uri=uri)
    # columns: run, beta, reward, final acc, best acc, steps, wall s, status
    assert {r[0]: r[-3:-1] for r in rows(by_dir)} == {r[0]: r[-3:-1] for r in rows(by_id)}
    assert {r[0]: r[-2] for r in rows(by_id)} == {"beta0.0": "2", "beta0.04": "2",
                                                  "beta0.1": "2.1"}


def test_report_by_experiment_skips_empty_sweep_parents(sweep, tmp_path, monkeypatch):
    uri, sweep_dir = sweep
    monkeypatch.chdir(tmp_path)
    empty = sweep_dir.parent / "stopped-before-its-jobs"
    config = OmegaConf.create({
        "tracker": {"name": "mlflow", "uri": uri, "experiment": "report"},
        "hydra": {"sweep": {"dir": str(empty)}, "overrides": {"task": ["algo.beta=1,2"]}}})
    callback = SweepCallback()
    callback.on_multirun_start(config)
    callback.on_multirun_end(config)  # a parent run without a child
    text, _ = report("report", uri=uri)
    assert sorted(r[0] for r in rows(text)) == ["beta0.0", "beta0.04", "beta0.1"]


def test_mesh_keys_keep_enough_of_their_path():
    from rlexp.config.naming import short_key
    from rlexp.tracking.compare import Row, label

    keys = ["hardware.trainer_mesh.fsdp", "hardware.rollout_mesh.fsdp", "algo.beta"]
    assert {k: short_key(k, keys) for k in keys} == {
        "hardware.trainer_mesh.fsdp": "trainer_mesh.fsdp",
        "hardware.rollout_mesh.fsdp": "rollout_mesh.fsdp", "algo.beta": "β"}
    row = Row(name="r", run_id=None, status="FINISHED",
              values={"hardware.trainer_mesh.fsdp": "1", "hardware.rollout_mesh.fsdp": "1",
                      "algo.beta": "0"})
    assert label(row, keys) == "trainer_mesh.fsdp=1 rollout_mesh.fsdp=1 β=0"


def test_legend_sits_outside_the_plots(tmp_path, monkeypatch):
    """One figure legend below the panels; no axes legend over the curves."""
    from matplotlib.figure import Figure

    from rlexp.tracking import plots

    saved = {}
    real_savefig = Figure.savefig

    def keep(fig, *args, **kwargs):
        saved["fig"] = fig
        return real_savefig(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    runs = [(f"beta={b}, epsilon={e}", {"train/reward_mean": [(s, s * b) for s in range(1, 9)],
                                        "eval/accuracy": [(s, e) for s in range(1, 9)]},
             f"beta={b}") for b in range(4) for e in range(3)]
    assert plots.plot_compare(runs, ["train/reward_mean", "eval/accuracy"], tmp_path / "c.png",
                              plots.group_colors([f"beta={b}" for b in range(4)]))
    fig = saved["fig"]
    renderer = fig.canvas.get_renderer()
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1
    box = fig.legends[0].get_window_extent(renderer)
    for ax in fig.axes:
        assert box.y1 <= ax.get_tightbbox(renderer).y0 + 1  # wholly below every panel
    assert len(fig.legends[0].get_texts()) == 12  # one entry per run, not per panel
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width  # and none cut off at the edges


# ------------------------------------------------------------------------------ seed groups

ALGOS, SEEDS = ("grpo", "gspo"), (0, 1, 2)


def final_accuracy(algo: str, seed: int) -> float:
    return 0.2 + 0.05 * seed + (0.04 if algo == "gspo" else 0.0) - 0.02 * (seed == 2)


def seeded_job(uri: str, sweep_dir: Path, algo: str, seed: int) -> None:
    """A job of `-m algo=grpo,gspo train.seed=0,1,2` as the orchestrator runs it (its params,
    the sweep.* tags of its swept values), eval at steps 0, 2, 4."""
    run_dir = sweep_dir / f"{algo}-seed{seed}"
    listener = MlflowListener(uri, "seeds", run_dir, gated=False, flush_every_s=3600.0)
    listener.on_run_start(RunInfo(
        name=f"{algo} seed={seed}", run_dir=run_dir,
        tags={"sweep.algo": algo, "sweep.train.seed": str(seed)},
        params={"algo.name": algo, "train.seed": seed, "train.steps": 4},
        extra={"parent_run_id": parent_run_id(sweep_dir)}))
    final = final_accuracy(algo, seed)
    for step in range(0, 5):
        if step:
            listener.on_metrics(step, {"train/reward_mean": final * step / 4})
        if step % 2 == 0:  # step 0 is the best (0.9): best acc must not report it
            listener.on_eval(step, {"eval/accuracy": 0.9 if step == 0 else final * step / 4},
                             [])
    summary = {"name": run_dir.name, "status": "FINISHED", "mlflow_run_id": run_id(run_dir),
               "overrides": [f"algo={algo}", f"train.seed={seed}"], "steps_done": 4,
               "wall_s": 1.0, "eval_after": {"eval/accuracy": final}}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    listener.on_run_end("FINISHED", summary)


@pytest.fixture(scope="module")
def seeds_sweep(tmp_path_factory) -> tuple[str, Path, str]:
    import contextlib
    import io

    root = tmp_path_factory.mktemp("seeds")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    prepare_store(uri)
    sweep_dir = root / "sweeps" / "seeds"
    config = OmegaConf.create({
        "tracker": {"name": "mlflow", "uri": uri, "experiment": "seeds"},
        "hydra": {"sweep": {"dir": str(sweep_dir)},
                  "overrides": {"task": ["algo=grpo,gspo", "train.seed=0,1,2"]}}})
    callback = SweepCallback()
    callback.on_multirun_start(config)
    for algo in ALGOS:
        for seed in SEEDS:
            seeded_job(uri, sweep_dir, algo, seed)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        callback.on_multirun_end(config)
    return uri, sweep_dir, out.getvalue()


def group_lines(text: str) -> dict[str, str]:
    return {line.split()[0]: line for line in text.splitlines()
            if re.match(r"(grpo|gspo)\s+\d+\s+\d\.\d{3} ", line)}


def test_a_seed_sweep_ends_with_its_group_table_and_the_report_agrees(seeds_sweep, capsys):
    from scipy import stats

    uri, sweep_dir, end = seeds_sweep
    ended = group_lines(end)
    assert list(ended) == ["grpo", "gspo"], end  # one line a group, in the sweep's order
    paired = [line for line in end.splitlines() if line.startswith("final acc, gspo - grpo")]
    assert len(paired) == 1 and "3 seeds" in paired[0]
    last = end.rstrip().splitlines()[-3:]
    assert last[0].startswith("rlexp: sweep seeds: 6 runs FINISHED; MLflow run "), end
    assert last[0].endswith(f" in {uri}")
    assert last[1] == f"  open it with: python -m rlexp.ui --uri {uri}"  # not the default
    assert last[2] == f"  tables: {sweep_dir.resolve() / 'summary.md'}"
    main([str(sweep_dir)])
    printed = capsys.readouterr().out
    assert group_lines(printed) == ended  # the same numbers, from the store
    assert paired[0] in printed
    # the numbers are scipy's on the sweep's own metric values
    for algo, line in ended.items():
        x = np.array([final_accuracy(algo, s) for s in SEEDS])
        mean, std, low, high = map(float, re.findall(r"\d\.\d{3}", line)[:4])
        assert mean == pytest.approx(x.mean(), abs=6e-4)
        assert std == pytest.approx(x.std(ddof=1), abs=6e-4)
        ci = stats.ttest_1samp(x, 0).confidence_interval(0.95)
        assert (low, high) == pytest.approx((ci.low, ci.high), abs=6e-4)
        best = re.findall(r"\d\.\d{3}", line)[4]  # best acc: after step 0 only (not 0.9)
        assert float(best) == pytest.approx(mean, abs=6e-4)
    a, b = (np.array([final_accuracy(g, s) for s in SEEDS]) for g in ALGOS)
    test = stats.ttest_rel(b, a)  # gspo - grpo is 0.04 on every seed (rounding apart)
    ci = test.confidence_interval(0.95)
    assert test.pvalue < 1e-3 and \
        f"{(b - a).mean():+.3f} [{ci.low:+.3f}, {ci.high:+.3f}], p < 0.001," in paired[0]


def test_the_parent_carries_the_comparison_and_children_their_group(seeds_sweep):
    from rlexp.tracking import store

    uri, sweep_dir, _ = seeds_sweep
    client = store.client(uri)
    parent = client.get_run(parent_run_id(sweep_dir))
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"groups.json", "groups.png", "summary.md", "comparison.png",
            "forest.png"} <= artifacts
    table = json.loads(Path(client.download_artifacts(parent.info.run_id, "groups.json",
                                                      str(sweep_dir / "dl"))).read_text())
    assert table["columns"][:3] == ["group", "n", "final acc"]
    assert [row[0] for row in table["data"]] == ["grpo", "gspo"]
    assert not parent.data.metrics  # no child's values copied, no per-group metric names
    summary = (sweep_dir / "summary.md").read_text()
    assert "## Seed groups" in summary and "final acc, gspo - grpo" in summary
    kids = compare.child_runs(client, parent.info.run_id)
    assert sorted(k.data.tags["rlexp.group"] for k in kids) == ["grpo"] * 3 + ["gspo"] * 3
    # the Overview: the answer in words, the group table, the paired line, then the command
    note = parent.data.tags["mlflow.note.content"]
    assert note.startswith("**final acc: gspo is better than grpo**\n"), note
    assert re.search(r"\| grpo \| 3 \| 0\.2\d\d ±0\.\d{3} \| \[0\.\d{3}, 0\.\d{3}\] \|", note), note
    assert "final acc, gspo - grpo: +0.040" in note
    assert note.index("[group curves](#/experiments/") < note.index("#### Command\n\n`python ")


def group_runs(client, parent_id: str) -> dict:
    """The parent's group runs by name."""
    return {r.info.run_name: r for r in compare.nested_runs(client, parent_id)
            if r.data.tags.get("rlexp.role") == "group"}


def test_a_run_per_group_carries_its_mean_curve_and_t_interval(seeds_sweep):
    """Under the children's metric names, at the steps every seed logged: one chart of
    eval/accuracy in MLflow's chart view then holds both groups."""
    from scipy import stats

    from rlexp.tracking import store

    uri, sweep_dir, _ = seeds_sweep
    client = store.client(uri)
    runs = group_runs(client, parent_run_id(sweep_dir))
    assert sorted(runs) == ["grpo: mean of 3", "gspo: mean of 3"]
    run = runs["gspo: mean of 3"]
    assert run.info.status == "FINISHED"
    assert set(run.data.metrics) == {f"{m}{s}" for m in ("eval/accuracy", "train/reward_mean")
                                     for s in ("", "_lo", "_hi")}
    history = {m: client.get_metric_history(run.info.run_id, m)
               for m in ("eval/accuracy", "eval/accuracy_lo", "eval/accuracy_hi")}
    assert [m.step for m in history["eval/accuracy"]] == [0, 2, 4]
    final = np.array([final_accuracy("gspo", s) for s in SEEDS])
    ci = stats.ttest_1samp(final, 0).confidence_interval(0.95)
    assert history["eval/accuracy"][-1].value == pytest.approx(final.mean())
    assert (history["eval/accuracy_lo"][-1].value, history["eval/accuracy_hi"][-1].value) == \
        pytest.approx((ci.low, ci.high))


def test_publishing_again_replaces_the_group_runs_and_counts_no_group_run_as_a_job(
        seeds_sweep):
    """A rerun of the sweep publishes again: still one run per group, the same Overview, and
    the report, the end line and resume see the six jobs only."""
    from rlexp.tracking import store
    from rlexp.tracking.callback import publish_comparison

    uri, sweep_dir, _ = seeds_sweep
    client = store.client(uri)
    parent = parent_run_id(sweep_dir)
    before = client.get_run(parent).data.tags["mlflow.note.content"]
    first = {r.info.run_id for r in group_runs(client, parent).values()}
    rows = [compare.row_from_run(client, r, None) for r in compare.child_runs(client, parent)]
    assert len(rows) == 6
    (sweep_dir / "again").mkdir()
    publish_comparison(client, parent, sweep_dir / "again", rows, "sweep seeds", "FINISHED")
    again = group_runs(client, parent)
    assert sorted(again) == ["grpo: mean of 3", "gspo: mean of 3"]
    assert not first & {r.info.run_id for r in again.values()}  # replaced, not added
    note = client.get_run(parent).data.tags["mlflow.note.content"]
    assert note == before and note.count("**final acc:") == 1
    assert len(compare.child_runs(client, parent)) == 6
    assert not any(r.data.tags.get("rlexp.role") == "group"
                   for r in compare.experiment_runs(client, "seeds"))


def test_runs_of_different_groups_never_share_a_colour(seeds_sweep, tmp_path, monkeypatch):
    from matplotlib.colors import to_hex
    from matplotlib.figure import Figure

    _, sweep_dir, _ = seeds_sweep
    saved = []
    real_savefig = Figure.savefig
    monkeypatch.setattr(Figure, "savefig",
                        lambda fig, *a, **k: (saved.append(fig), real_savefig(fig, *a, **k))[1])
    report(str(sweep_dir))
    comparison = saved[0]  # comparison.png, then groups.png and forest.png
    colour = {line.get_label(): to_hex(line.get_color())
              for line in comparison.axes[0].get_lines()}
    assert len(colour) == 6
    by_group = {g: {c for label, c in colour.items() if label.startswith(g)} for g in ALGOS}
    assert all(len(c) == 1 for c in by_group.values()) and \
        by_group["grpo"] != by_group["gspo"], colour
    bands = saved[1]
    assert {line.get_label(): to_hex(line.get_color()) for line in bands.axes[0].get_lines()} \
        == {g: c.pop() for g, c in by_group.items()}  # each group's colour in both plots
    assert len(bands.axes[0].collections) == 2  # one CI band a group
    assert "t-interval" in bands.texts[0].get_text() and "bootstrap" not in \
        bands.texts[0].get_text()


def test_sixteen_groups_get_distinct_hues():
    import colorsys

    from rlexp.tracking.plots import group_colors

    colors = group_colors([f"g{i}" for i in range(16)])
    hues = sorted(colorsys.rgb_to_hls(*c)[0] * 360 for c in colors.values())
    gaps = np.diff(hues + [hues[0] + 360])
    assert len(hues) == 16 and gaps.min() >= 22.4
    assert group_colors(["a", "b"])["a"] == group_colors(["a", "b", "c"])["a"]  # baseline


# ------------------------------------------------------------------------------ readable ends


def rlexp_report(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlexp.report", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_bad_usages_end_in_one_line_with_exit_2(sweep, tmp_path):
    from helpers import one_line_exit_2

    uri, sweep_dir = sweep
    one_line_exit_2(rlexp_report(str(sweep_dir), "--metric", "nonsense", cwd=tmp_path),
                    "--metric 'nonsense'", "eval/accuracy", "eval/pass_at_k")
    one_line_exit_2(rlexp_report("/nonexistent/sweep", cwd=tmp_path),
                    "no directory /nonexistent/sweep")
    ui = subprocess.run([sys.executable, "-m", "rlexp.ui", "--port", "0"], cwd=tmp_path,
                        capture_output=True, text=True, timeout=120)
    one_line_exit_2(ui, f"no MLflow store at {tmp_path.resolve() / 'outputs' / 'mlflow.db'}")
    assert not (tmp_path / "outputs").exists()  # rlexp.ui never creates a store


def _one_line_exit_2(capsys, command, *argv: str) -> str:
    with pytest.raises(SystemExit) as ended:
        command(list(argv))
    out, err = capsys.readouterr()
    assert ended.value.code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith("rlexp: error: ") and "Traceback" not in err
    return err


def test_a_store_report_and_ui_cannot_read_is_one_line_before_mlflow(sweep, tmp_path, capsys):
    """A usage mistake, an unknown scheme, a server nobody serves, a file that is no database,
    --out naming a file: one line, exit 2 (MLflow's traceback after its retries before); a
    sweep dir whose store is down still reports its jobs from their summary.json files."""
    from rlexp.tracking import ui
    from rlexp.tracking.ui import free_port

    down = f"http://127.0.0.1:{free_port()}"
    (tmp_path / "notdb.db").write_text("not a database")
    (tmp_path / "afile").write_text("")
    assert "required: target (see python -m rlexp.report --help)" in _one_line_exit_2(
        capsys, main)
    assert "unknown scheme 'nonesuch'; valid schemes are sqlite, http" in _one_line_exit_2(
        capsys, main, "exp", "--uri", "nonesuch://x")
    assert "cannot be read: down:" in _one_line_exit_2(capsys, main, "exp", "--uri", down)
    assert "is not an SQLite database" in _one_line_exit_2(
        capsys, main, "exp", "--uri", f"sqlite:///{tmp_path / 'notdb.db'}")
    uri, sweep_dir = sweep
    assert "--out" in _one_line_exit_2(capsys, main, str(sweep_dir), "--out",
                                       str(tmp_path / "afile"))
    assert "unknown scheme" in _one_line_exit_2(capsys, ui.main, "--uri", "nonesuch://x")
    assert "invalid int value" in _one_line_exit_2(capsys, ui.main, "--port", "abc")
    moved = tmp_path / "moved"  # the sweep's parent run.json names a store now down
    import shutil

    shutil.copytree(sweep_dir, moved)
    parent = json.loads((moved / "parent_run.json").read_text())
    (moved / "parent_run.json").write_text(json.dumps({**parent, "uri": down}))
    main([str(moved), "--out", str(tmp_path / "png")])
    out, err = capsys.readouterr()
    assert err.count("rlexp: warning:") == 1 and "summary.json" in err, err
    assert [r[0] for r in rows(out)] == ["beta0.04", "beta0.1", "beta0.0"]
    # saved with its credentials masked: said so (not tried as a wrong password), unless
    # $MLFLOW_TRACKING_URI names that store whole
    masked = "http://alice:***@127.0.0.1:1/"
    (moved / "parent_run.json").write_text(json.dumps({**parent, "uri": masked}))
    main([str(moved), "--out", str(tmp_path / "png")])
    out, err = capsys.readouterr()
    assert f"names {masked} with its credentials masked: pass the full URI with --uri" in err
    assert [r[0] for r in rows(out)] == ["beta0.04", "beta0.1", "beta0.0"]


def test_a_masked_uri_is_whole_again_from_the_environment(monkeypatch):
    saved = "http://alice:***@mlflow.example:5000"
    with pytest.raises(UserError, match="credentials masked: pass the full URI with --uri"):
        store.unmasked(saved, "parent_run.json")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://alice:s3cret@mlflow.example:5000")
    assert store.unmasked(saved, "x") == "http://alice:s3cret@mlflow.example:5000"
    assert store.unmasked("sqlite:///a.db", "x") == "sqlite:///a.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://bob:s3cret@mlflow.example:5000")
    with pytest.raises(UserError):
        store.unmasked(saved, "x")  # another user's store


def test_one_seed_per_group_says_to_add_seeds_in_one_line():
    rows = [compare.Row(name=f"b{i}", run_id=None, status="FINISHED",
                        values={"algo.beta": str(i)}, final_accuracy=0.3 + i / 100)
            for i in range(13)]
    groups = compare.group_rows(rows, ["algo.beta"])
    lines = compare.paired_lines(groups, groups[0])
    assert lines == ["final acc: one seed per group, no spread to judge a difference by: add "
                     "train.seed=0,1,2 to the sweep"]
    assert "one seed per group" in compare.band_title(groups, "sweep")


def test_many_groups_fit_100_columns_sorted_baseline_first_with_holm():
    rows = [compare.Row(name=f"{algo}-{seed}", run_id=None, status="FINISHED",
                        values={"algo": algo, "algo.beta": "0.04", "train.seed": str(seed)},
                        final_accuracy=0.3 + 0.01 * i + 0.02 * seed, best_accuracy=0.5,
                        final_reward=1.0 + seed, best_reward=2.0 + 0.1 * seed)
            for i, algo in enumerate(["reinforce_pp_baseline", "grpo", "gspo", "dr_grpo"])
            for seed in range(3)]
    rows[4].values["algo.beta"] = "0.1"  # a second swept key: longer labels
    groups, table, paired = compare.group_report(rows, ["algo", "algo.beta", "train.seed"])
    text = table + "\n" + paired
    assert max(map(len, text.splitlines())) <= compare.WIDTH, text
    assert groups[0].label.startswith("reinforce_pp_baseline")  # the sweep's first: baseline
    means = [g.stats("final_accuracy").mean for g in groups[1:]]
    assert means == sorted(means, reverse=True)
    words = " ".join(paired.split())
    assert "p < 0.001 (Holm < 0.001)" in words and "Holm: p adjusted for the 3 comparisons" in words


def test_the_answer_in_words_follows_the_paired_test():
    """Better and worse only where the paired line says 'beyond seed noise' (after Holm's
    correction), the rest not distinguishable; one seed per group asks for seeds."""
    shift = {"base": 0.0, "up": 0.05, "down": -0.05, "same": 0.0}
    noise = {"base": [0, 0, 0], "up": [0.001, -0.001, 0], "down": [0, 0.001, -0.001],
             "same": [0.04, -0.03, -0.01]}
    rows = [compare.Row(name=f"{g}-{s}", run_id=None, status="FINISHED",
                        values={"algo": g, "train.seed": str(s)},
                        final_accuracy=0.3 + 0.02 * s + shift[g] + noise[g][s])
            for g in shift for s in range(3)]
    groups, _, paired = compare.group_report(rows, ["algo", "train.seed"])
    assert compare.answer(groups) == ("final acc: up is better than base; down is worse than "
                                      "base; same is not distinguishable from base")
    words = " ".join(paired.split())  # the lines unwrapped
    assert "down - base: -0.050 [-0.052, -0.048], p < 0.001 (Holm < 0.001), 3 seeds: beyond " \
        "seed noise" in words and "3 seeds: not distinguishable from seed noise" in words
    one_seed = compare.group_rows([r for r in rows if r.values["train.seed"] == "0"], ["algo"])
    assert compare.answer(one_seed).endswith("add train.seed=0,1,2")
    assert compare.answer(one_seed[:1]) == ""


def test_children_come_in_the_sweeps_order_not_the_order_their_runs_started(client):
    """joblib starts two jobs together: job 1's MLflow run may be created a moment before job
    0's. The children (and so the first group, the paired lines' baseline) follow the sweep's
    job numbers; a run without one (an older run) keeps its start-time place before them."""
    exp = client.create_experiment("job-order")
    parent = client.create_run(exp, run_name="sweep").info.run_id
    for name, start, index in (("job1", 1000, "1"), ("job0", 2000, "0"), ("old", 2500, None),
                               ("job2", 3000, "2")):
        tags = {"mlflow.parentRunId": parent}
        if index is not None:
            tags[compare.JOB_INDEX_TAG] = index
        client.create_run(exp, start_time=start, run_name=name, tags=tags)
    names = [r.info.run_name for r in compare.child_runs(client, parent)]
    assert names == ["old", "job0", "job1", "job2"]

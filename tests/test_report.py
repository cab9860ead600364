"""`python -m rlexp.report`: the comparison table and PNG of a sweep, a parent run, an experiment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rlexp.base.events import RunInfo
from rlexp.tracking.report import main, report
from rlexp.tracking import parent_run_id, prepare_store, run_id
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
    return [line.split() for line in text.splitlines()[2:]]


def test_report_of_a_sweep_dir(sweep):
    uri, sweep_dir = sweep
    text, png = report(str(sweep_dir))
    header = text.splitlines()[0].split("  ")
    assert [h.strip() for h in header if h.strip()] == [
        "run", "algo.beta", "final reward", "final acc", "best acc", "steps", "wall s", "status"]
    # ranked by final eval accuracy: 0.04 (0.36) > 0.1 (0.3) > 0 (0.2)
    assert rows(text) == [
        ["beta0.04", "0.04", "1.04", "0.36", "0.36", "4", "2", "FINISHED"],
        ["beta0.1", "0.1", "1.1", "0.3", "0.5", "4", "2.1", "FINISHED"],
        ["beta0.0", "0.0", "1", "0.2", "0.2", "4", "2", "FINISHED"]]
    assert png == sweep_dir / "comparison.png" and png.read_bytes()[:4] == b"\x89PNG"


def test_report_by_parent_run_id_and_metric(sweep, tmp_path, monkeypatch):
    uri, sweep_dir = sweep
    monkeypatch.chdir(tmp_path)
    parent = parent_run_id(sweep_dir)
    text, png = report(parent, uri=uri, metric="eval/pass_at_k")
    assert "final eval/pass_at_k" in text.splitlines()[0]
    assert [r[0] for r in rows(text)] == ["beta0.0", "beta0.04", "beta0.1"]  # 1.0 > 0.96 > 0.9
    assert png == tmp_path / f"comparison-{parent}.png" and png.exists()
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


def test_cli_prints_table_and_png_path(sweep, capsys):
    _, sweep_dir = sweep
    main([str(sweep_dir)])
    out = capsys.readouterr().out
    assert "beta0.04" in out and f"curves: {sweep_dir / 'comparison.png'}" in out
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
    from rlexp.tracking.compare import Row, label, short_keys

    keys = ["hardware.trainer_mesh.fsdp", "hardware.rollout_mesh.fsdp", "algo.beta"]
    assert short_keys(keys) == {"hardware.trainer_mesh.fsdp": "trainer_mesh.fsdp",
                                "hardware.rollout_mesh.fsdp": "rollout_mesh.fsdp",
                                "algo.beta": "beta"}
    row = Row(name="r", run_id=None, status="FINISHED",
              values={"hardware.trainer_mesh.fsdp": "1", "hardware.rollout_mesh.fsdp": "1",
                      "algo.beta": "0"})
    assert label(row, keys) == "trainer_mesh.fsdp=1, rollout_mesh.fsdp=1, beta=0"


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
                                        "eval/accuracy": [(s, e) for s in range(1, 9)]})
            for b in range(4) for e in range(3)]
    assert plots.plot_compare(runs, ["train/reward_mean", "eval/accuracy"], tmp_path / "c.png")
    fig = saved["fig"]
    renderer = fig.canvas.get_renderer()
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1
    box = fig.legends[0].get_window_extent(renderer)
    for ax in fig.axes:
        assert box.y1 <= ax.get_tightbbox(renderer).y0 + 1  # wholly below every panel
    assert len(fig.legends[0].get_texts()) == 12  # one entry per run, not per panel
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width  # and none cut off at the edges

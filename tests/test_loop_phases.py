"""The loop's phases in order (rlexp.job.loop): evaluations, checkpoints and a SIGTERM's
preemption at the steps the module docstring promises, with the real Checkpointer over the
fake engine's JSON store; every function of rlexp.job stays short enough to read, the job's
phases (rlexp.job.experiment) fit in one file of at most 400 lines, and no two functions of
src/ and launchers/ share a name grep would confuse."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rlexp.base.events import Listener, Listeners
from rlexp.config.schema import Config
from rlexp.job import loop
from rlexp.job.resume import Checkpointer, Preempted, StopFlag

from fake_engine import FakeEngine, evaluate as fake_evaluate

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "src" / "rlexp" / "job"
# The longest a function of rlexp.job may be (lines, decorators and docstring included).
MAX_LINES = 50
# The longest job/experiment.py may be: the phases, the policies in modules of their own.
MAX_PHASES_LINES = 400
# Names too common to define twice: grep for `def run` must find the one function meant.
UNIQUE_NAMES = ("build", "write_summary", "run")


class Events(Listener):
    """What the loop told its listeners, in order: ('metrics'|'eval'|'checkpoint', step)."""

    def __init__(self):
        self.seen: list[tuple[str, int]] = []

    def on_metrics(self, step, metrics):
        self.seen.append(("metrics", step))

    def on_eval(self, step, metrics, samples):
        self.seen.append(("eval", step))

    def on_checkpoint(self, step, path):
        self.seen.append(("checkpoint", step))


def _run(tmp_path, monkeypatch, events, steps, eval_every, ckpt_every, sigterm_at=None):
    monkeypatch.setattr(loop, "evaluate", fake_evaluate)  # the name the loop calls
    cfg = Config()
    cfg.train.steps, cfg.eval.every, cfg.train.checkpoint_every = steps, eval_every, ckpt_every
    stop = StopFlag()

    def step_fn():
        if engine.done + 1 == sigterm_at:  # the signal arrives during this step
            stop.requested = True

    engine = FakeEngine(cfg, curve=lambda s: s / 10, step_fn=step_fn)
    ckpt = Checkpointer(tmp_path / "checkpoints", 3, engine)
    try:
        return loop.train_steps(cfg, engine, Listeners([events]), tmp_path, checkpointer=ckpt,
                                stop=stop)
    finally:
        ckpt.close()


def test_evaluations_and_checkpoints_come_at_their_steps(tmp_path, monkeypatch):
    events = Events()
    summary = _run(tmp_path, monkeypatch, events, steps=4, eval_every=2, ckpt_every=3)
    assert events.seen == [("eval", 0), ("checkpoint", 0),
                           ("metrics", 1), ("metrics", 2), ("eval", 2), ("metrics", 3),
                           ("checkpoint", 3), ("metrics", 4), ("eval", 4), ("checkpoint", 4)]
    assert summary["steps_done"] == 4 and summary["eval_after"]["eval/accuracy"] == 0.4
    assert set(summary["phase_seconds"]) == {"evaluate", "log", "checkpoint", "data", "step"}


@pytest.mark.parametrize("at,saved", [(2, [0, 2]), (3, [0, 2, 3])])
def test_a_sigterm_saves_its_step_once_then_preempts(tmp_path, monkeypatch, at, saved):
    """At a checkpoint step (2) the regular save is the preemption's; elsewhere one more."""
    events = Events()
    with pytest.raises(Preempted, match=f"step {at}"):
        _run(tmp_path, monkeypatch, events, steps=5, eval_every=0, ckpt_every=2, sigterm_at=at)
    assert [s for kind, s in events.seen if kind == "checkpoint"] == saved
    assert events.seen[-1] == ("checkpoint", at)


def test_a_sigterm_at_the_last_step_finishes_the_run(tmp_path, monkeypatch):
    events = Events()
    summary = _run(tmp_path, monkeypatch, events, steps=3, eval_every=0, ckpt_every=0,
                   sigterm_at=3)
    assert summary["steps_done"] == 3 and events.seen[-2:] == [("eval", 3), ("checkpoint", 3)]


def _lengths(path: Path) -> dict[str, int]:
    out = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            out[f"{path.name}:{node.name}"] = node.end_lineno - start + 1
    return out


def test_every_function_of_the_job_package_is_short():
    lengths = {k: v for p in sorted(JOB.glob("*.py")) for k, v in _lengths(p).items()}
    assert len(lengths) > 50  # the walk found the package
    assert {k: v for k, v in lengths.items() if v > MAX_LINES} == {}


def test_the_length_check_can_fail(tmp_path):
    long = tmp_path / "long.py"
    long.write_text("def f():\n" + "    x = 1\n" * MAX_LINES)
    assert _lengths(long) == {"long.py:f": MAX_LINES + 1}


def test_the_job_phases_fit_in_one_short_file():
    assert len((JOB / "experiment.py").read_text().splitlines()) <= MAX_PHASES_LINES


def _defined(paths: list[Path], names: tuple[str, ...]) -> dict[str, list[str]]:
    """Where each of `names` is defined as a function or method: {name: ['file:line', ...]}."""
    out: dict[str, list[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
                out.setdefault(node.name, []).append(f"{path}:{node.lineno}")
    return out


def test_no_two_functions_share_a_common_name():
    paths = sorted([*(ROOT / "src").rglob("*.py"), *(ROOT / "launchers").rglob("*.py")])
    assert len(paths) > 100  # the walk found the code
    assert {k: v for k, v in _defined(paths, UNIQUE_NAMES).items() if len(v) > 1} == {}


def test_the_name_check_can_fail(tmp_path):
    (tmp_path / "a.py").write_text("def run():\n    pass\n")
    (tmp_path / "b.py").write_text("class B:\n    def run(self):\n        pass\n")
    found = _defined([tmp_path / "a.py", tmp_path / "b.py"], ("run",))
    assert [where.rsplit("/", 1)[-1] for where in found["run"]] == ["a.py:1", "b.py:2"]

"""What a run and a sweep print: the bar at 80 columns, the start-up phases before JAX,
one stream in one format, the jobs' labels, the sweep's bar and its lines. Fast: a pty, a
StringIO, Python logging and synthetic event files stand in for the terminal and the jobs;
tests/test_sweeps.py runs a real joblib sweep (slow)."""

from __future__ import annotations

import fcntl
import io
import json
import logging
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

import pytest

from helpers import cli_env
from rlexp.base.events import RunInfo
from rlexp.config.schema import Config
from rlexp.job import sweep_messages
from rlexp.job.console import ConsoleListener
from rlexp.job.sweep_messages import SweepEnv, job_label, job_output
from rlexp.job.sweep_monitor import SweepMonitor, sweep_eta

EVAL = {"eval/accuracy": 0.8125, "eval/format_accuracy": 1.0, "eval/pass_at_k": 0.9,
        "eval/k": 4, "eval/mean_reward": 1.5}
# The run names of the issue: 47 characters, which the bar used as its label.
NAME = "grpo-tiny-arithmetic-cpu-trackernone-steps900_9ac713"


def _read_all(fd: int) -> str:
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out.decode(errors="replace")


def test_at_80_columns_the_bar_keeps_reward_step_time_and_last_eval_accuracy():
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    os.set_blocking(master, False)
    cfg = Config()
    cfg.train.steps = 900
    with open(slave, "w", closefd=True) as tty:
        listener = ConsoleListener(cfg, stream=tty)
        assert listener.terminal
        listener.on_run_start(RunInfo(name=NAME, run_dir=None, params={}, tags={},
                                      total_steps=900))
        listener.on_eval(300, EVAL, [])
        listener.on_metrics(301, {"train/reward_mean": 1.234, "time/step_s": 0.61})
        tty.flush()
        drawn = _read_all(master)
        listener.on_run_end("KILLED", {"steps_done": 301})
    os.close(master)
    frames = [f for f in re.split(r"[\r\n]", drawn) if "301/900" in f]
    assert frames, drawn
    last = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", frames[-1]).rstrip()
    assert len(last) <= 80, last
    for needle in ("reward=1.234", "s/step=0.61", "acc@300=0.812"):
        assert needle in last, last


def _piped(steps: int) -> tuple[ConsoleListener, io.StringIO]:
    cfg = Config()
    cfg.train.steps = steps
    out = io.StringIO()
    listener = ConsoleListener(cfg, stream=out)
    listener.on_run_start(RunInfo(name=NAME, run_dir=None, params={}, tags={},
                                  total_steps=steps))
    return listener, out


def test_step_lines_say_which_evaluation_their_accuracy_is_from():
    listener, out = _piped(10)
    listener.on_eval(0, EVAL, [])
    listener.on_metrics(1, {"train/reward_mean": 1.0, "time/step_s": 0.1})
    step = next(ln for ln in out.getvalue().splitlines() if ln.startswith("step 1/10"))
    assert "acc@0 0.812" in step, step


def test_the_compile_phase_is_said_before_the_first_evaluation():
    listener, out = _piped(10)
    first = out.getvalue().splitlines()[0]
    assert first.startswith("rlexp: ") and "compiling" in first, first


# ------------------------------------------------------------ one stream, one format


@pytest.fixture()
def hydra_like_logging():
    """The root logger as Hydra's job logging leaves it: a stdout handler with a timestamp."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    yield
    root.handlers[:], _ = saved
    root.setLevel(saved[1])


def test_a_runs_log_lines_go_to_stderr_in_rlexps_format(hydra_like_logging, capsys):
    with job_output(None, []):
        logging.getLogger("rlexp.engine.warm_start").info("warm start: loaded from the cache")
        logging.getLogger("absl").warning("something a user should see")
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == ["rlexp: warm start: loaded from the cache",
                                "absl: warning: something a user should see"]


def test_in_a_sweep_every_line_carries_the_label_and_the_table_stays_in_the_log(
        hydra_like_logging, capsys, tmp_path):
    from rlexp.engine import warm_start

    log_file = logging.FileHandler(tmp_path / "rlexp.log")  # Hydra's job log file
    logging.getLogger().addHandler(log_file)
    env = SweepEnv(size=8, keys=["algo.beta", "algo.num_generations"]).to_env()
    overrides = ["algo.beta=0.04", "algo.num_generations=4", "train.steps=10"]
    with job_output(2, overrides, environ=env):
        warm_start.log.info("warm start: loaded from the cache")
        logging.getLogger("rlexp.engine").warning("dataset: skipped 2 rows")
        listener = ConsoleListener(Config())  # prints to sys.stderr: the job's
        listener.on_run_start(RunInfo(name=NAME, run_dir=None, params={}, tags={},
                                      total_steps=10))
        listener.on_eval(0, EVAL, [])
        for step in range(1, 11):
            listener.on_metrics(step, {"train/reward_mean": 1.0, "time/step_s": 0.1})
        listener.on_eval(10, EVAL, [])
        listener.on_run_end("FINISHED", {"steps_done": 10, "eval_after": EVAL})
        print("already finished", file=sys.stdout)
    out, err = capsys.readouterr()
    lines = [ln for ln in (out + err).splitlines() if ln.strip()]
    assert all(ln.startswith("[3/8 β=0.04 G=4] ") for ln in lines), lines
    assert "[3/8 β=0.04 G=4] rlexp: warm start: loaded from the cache" in lines
    assert any("rlexp: warning: dataset: skipped 2 rows" in ln for ln in lines)
    assert any("step 10/10" in ln for ln in lines)
    # the before/after table stays in the job's log file: the sweep ends with its group table
    assert not any("accuracy  " in ln for ln in lines)
    log_file.close()
    assert "accuracy  " in (tmp_path / "rlexp.log").read_text()
    assert sys.stderr is not None and not isinstance(sys.stderr, sweep_messages.LabelledStream)


def test_on_a_terminal_a_sweeps_job_draws_no_bar_and_sends_its_lines_to_the_launcher(
        tmp_path, hydra_like_logging, capsys):
    env = SweepEnv(size=4, keys=["algo.beta"], relay=tmp_path, terminal=True).to_env()
    with job_output(0, ["algo.beta=0.04"], environ=env):
        listener = ConsoleListener(Config())
        assert not listener.terminal  # the launching process draws the only bar
        listener.on_run_start(RunInfo(name=NAME, run_dir=None, params={}, tags={},
                                      total_steps=10))
        listener.on_eval(0, EVAL, [])
        listener.on_metrics(10, {"train/reward_mean": 1.0, "time/step_s": 0.1})
        listener.on_run_end("FINISHED", {"steps_done": 10, "eval_after": EVAL})
    out, err = capsys.readouterr()
    assert out == err == ""  # nothing of the job's reaches the terminal itself
    records = [json.loads(ln) for ln in (tmp_path / "0.jsonl").read_text().splitlines()]
    kinds = [r["kind"] for r in records]
    assert kinds[0] == "start" and kinds[-1] == "end" and records[-1]["status"] == "FINISHED"
    assert "step" not in kinds  # start, lines, end: the launcher's bar counts jobs
    lines = [r["text"] for r in records if r["kind"] == "line"]
    assert any("eval @ step 0" in ln for ln in lines)
    assert all(ln.startswith("[1/4 β=0.04] ") for ln in lines if ln.strip()), lines


def test_a_sweeps_console_shows_each_jobs_start_up_phases_labelled(tmp_path, hydra_like_logging,
                                                                  capsys):
    """The first minute of a sweep on a terminal: each job's build, warm start (with its
    progress) and compile lines reach the sweep's console through the relay its jobs write,
    labelled as their step lines, above the one bar (once only "sweep 0/2 done, 2 running")."""
    from rlexp.engine import warm_start
    from rlexp.job.console import phase

    env = SweepEnv(size=2, keys=["algo.beta"], relay=tmp_path, terminal=True).to_env()
    for index, beta in enumerate(("0", "0.04")):
        with job_output(index, [f"algo.beta={beta}"], environ=env):
            phase("building the model (importing JAX and Tunix)")
            warm_start.log.info("warm start: 300 supervised steps on the reference answers")
            warm_start.log.info("warm start: 100/300 steps, loss 1.234, 8s")
            listener = ConsoleListener(Config())
            listener.on_run_start(RunInfo(name=NAME, run_dir=None, params={}, tags={},
                                          total_steps=10))
            listener.on_metrics(1, {"train/reward_mean": 1.0, "time/step_s": 0.1})
    assert capsys.readouterr() == ("", "")  # all of it went through the relay
    out = io.StringIO()
    monitor = SweepMonitor(tmp_path, size=2, workers=2, stream=out, terminal=True)
    monitor.poll()
    monitor.close()
    lines = [ln for ln in re.split(r"[\r\n]", out.getvalue()) if "rlexp: " in ln or "step" in ln]
    for label in ("[1/2 β=0]", "[2/2 β=0.04]"):
        mine = [ln.removeprefix(label + " ") for ln in lines if ln.startswith(label + " ")]
        assert mine[:4] == ["rlexp: building the model (importing JAX and Tunix)",
                            "rlexp: warm start: 300 supervised steps on the reference answers",
                            "rlexp: warm start: 100/300 steps, loss 1.234, 8s",
                            "rlexp: training 10 steps; compiling the first evaluation and step"], \
            lines
        assert mine[4].startswith("step 1/10: reward 1.000")


def test_a_stopped_sweep_job_tells_the_launcher_killed_not_failed(tmp_path, hydra_like_logging,
                                                                  capsys):
    from rlexp.job.disk import Observers
    from rlexp.job.listeners import listeners_for

    cfg = Config()
    cfg.tracker.name = "none"
    env = SweepEnv(size=2, keys=[], relay=tmp_path, terminal=False).to_env()
    with job_output(1, [], environ=env):  # the job returns (NaN): the sweep's others go on
        listeners = listeners_for(cfg, tmp_path)  # the run's own, this job's among them
        assert listeners[-1] is sweep_messages.current_job()
        Observers(listeners, tmp_path).on_run_end("KILLED", {"steps_done": 3})
    (end,) = [r for r in map(json.loads, (tmp_path / "1.jsonl").read_text().splitlines())
              if r["kind"] == "end"]
    assert end["status"] == "KILLED"
    assert sweep_messages.current_job() is None
    capsys.readouterr()


@pytest.mark.parametrize("index,overrides,keys,label", [
    (2, ["algo.beta=0.04", "algo.num_generations=4", "train.steps=2"],
     ["algo.beta", "algo.num_generations"], "[3/8 β=0.04 G=4]"),
    (0, ["algo=gspo", "train.learning_rate=0.000312456"], ["algo", "train.learning_rate"],
     "[1/8 gspo lr=0.0003125]"),
    (4, ["algo.beta=0.0", "+train.seed=3"], ["algo.beta", "train.seed"], "[5/8 β=0 seed=3]"),
    (1, ["x=1"], [], "[2/8]"),
])
def test_job_labels_are_short(index, overrides, keys, label):
    assert job_label(index, 8, overrides, keys) == label


# ---------------------------------------------------------------------- the sweep's view


def test_the_time_left_comes_from_the_finished_jobs():
    assert sweep_eta([], [5.0], 3, 2) is None  # nothing finished yet: no guess
    # mean 60 s; running jobs need 60-20 and 60-70 (late: 0); 3 queued x 60; 2 at a time
    assert sweep_eta([50.0, 70.0], [20.0, 70.0], 3, 2) == pytest.approx((40 + 0 + 180) / 2)


def _event(relay: Path, index: int, **record) -> None:
    with open(relay / f"{index}.jsonl", "a") as handle:
        handle.write(json.dumps(record) + "\n")


def test_piped_the_sweep_adds_one_line_per_finished_job(tmp_path):
    out = io.StringIO()
    monitor = SweepMonitor(tmp_path, size=4, workers=2, stream=out, terminal=False)
    now = time.time()
    _event(tmp_path, 0, kind="start", t=now - 60)
    _event(tmp_path, 1, kind="start", t=now - 30)
    _event(tmp_path, 0, kind="end", status="FINISHED", t=now)
    monitor.poll()
    _event(tmp_path, 1, kind="end", status="FAILED", t=now)
    monitor.poll()
    monitor.finish({2: True, 3: False})  # ended without events of their own
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("rlexp: sweep 1/4 done, 1 running, ~") and "left" in lines[0]
    assert lines[1].startswith("rlexp: sweep 2/4 done, 0 running, 1 failed")
    assert lines[-1].startswith("rlexp: sweep 4/4 done, 0 running, 2 failed")
    assert monitor.closed and "\r" not in out.getvalue()


def test_on_a_terminal_one_bar_with_the_jobs_lines_above_it(tmp_path):
    out = io.StringIO()
    monitor = SweepMonitor(tmp_path, size=8, workers=2, stream=out, terminal=True)
    now = time.time()
    _event(tmp_path, 0, kind="start", t=now - 90)
    _event(tmp_path, 0, kind="line", text="[1/8 beta=0] eval @ step 0: accuracy 0.250")
    _event(tmp_path, 0, kind="end", status="FINISHED", t=now - 30)
    _event(tmp_path, 1, kind="start", t=now - 80)
    _event(tmp_path, 1, kind="end", status="FAILED", t=now - 20)
    _event(tmp_path, 2, kind="start", t=now - 10)
    monitor.poll()
    bar = monitor.bar
    assert bar is not None
    assert bar.desc.startswith("sweep 2/8 done, 1 running, 1 failed, ~"), bar.desc
    monitor.close()
    text = out.getvalue()
    assert "[1/8 beta=0] eval @ step 0: accuracy 0.250\n" in text
    # one bar: every redraw says "sweep", none is a job's own
    frames = [f for f in re.split(r"[\r\n]", text) if "|" in f]
    assert frames and all(f.lstrip("\x1b[A ").startswith("sweep ") for f in frames), frames


def test_the_joblib_parallel_line_is_dropped():
    from hydra_plugins.rlexp_presets.joblib_launcher import quiet_parallel_line

    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    core = logging.getLogger("hydra_plugins.hydra_joblib_launcher._core")
    handler = Keep()
    core.addHandler(handler)
    try:
        quiet_parallel_line()
        core.warning("Joblib.Parallel(n_jobs=2,backend=loky,prefer=processes) is launching 4 jobs")
        core.warning("Launching jobs, sweep output dir : x")
    finally:
        core.removeHandler(handler)
    assert seen == ["Launching jobs, sweep output dir : x"]


# ------------------------------------------------------------ the first line, before JAX

# Loaded at start-up through PYTHONPATH: the moment anything imports jax, say so on stderr
# and end the process (the test needs the order of the lines, not a training run).
JAX_TRIPWIRE = textwrap.dedent('''
    import os, sys, time

    class _Tripwire:
        def find_spec(self, name, path=None, target=None):
            if name == "jax":
                sys.stderr.write(f"<<import jax at {time.monotonic() - START:.2f}s>>\\n")
                sys.stderr.flush()
                os._exit(0)
            return None

    START = float(os.environ["RLEXP_TEST_T0"])
    sys.meta_path.insert(0, _Tripwire())
''')


def test_on_a_terminal_the_first_line_comes_before_jax_is_imported(tmp_path):
    """stderr a terminal (a pty): the run says what it does before JAX's import (1.4 s) and
    Tunix's (3.5 s) begin. Piped, a bad input found while building stays one line."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(JAX_TRIPWIRE)
    path = os.environ.get("PYTHONPATH")
    env = cli_env({"PYTHONPATH": f"{site}{os.pathsep}{path}" if path else str(site)})
    env["RLEXP_TEST_T0"] = str(time.monotonic())
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "rlexp", "tracker=none", "train.steps=2"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    stderr = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the process ended: the pty's other end is closed
            break
        if not chunk:
            break
        stderr += chunk
    proc.wait(timeout=120)
    os.close(master)
    lines = [ln for ln in stderr.decode(errors="replace").splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("<<import jax"), lines
    # the command's start line (rlexp.__main__), then the build's, both before JAX
    assert lines[0] == "rlexp: starting a run: reading the config", lines
    first = lines[1]
    assert first.startswith("rlexp: ") and "building the model" in first, lines
    print(f"first line, then JAX imported {lines[-1]}")


def test_a_failed_run_ends_with_its_error_line_not_a_table():
    stream = io.StringIO()
    console = ConsoleListener(Config(), stream=stream, terminal=False)
    console.on_eval(0, {"eval/accuracy": 0.5}, [])
    console.on_eval(2, {"eval/accuracy": 0.25}, [])
    console.on_run_end("FAILED", {"steps_done": 2, "wall_s": 3.0, "eval_before": {
        "eval/accuracy": 0.5}, "error": "reward exact raised ValueError: down at step 3"})
    assert stream.getvalue().splitlines() == [
        "eval @ step 0: accuracy 0.500  format 0.000  pass@k 0.000",
        "eval @ step 2: accuracy 0.250  format 0.000  pass@k 0.000",
        "rlexp: error: reward exact raised ValueError: down at step 3"]


def test_a_sweep_ends_with_each_failed_jobs_line_and_exit_1(tmp_path, capsys):
    from rlexp.base.summary import write_summary

    for name, status, error, beta in (("a", "FINISHED", None, "0"),
                                      ("b", "FAILED", "reward x raised ValueError: y at step 2",
                                       "0.04"),
                                      ("c", "KILLED", "preempted (SIGTERM) after step 3", "0.1")):
        (tmp_path / name).mkdir()
        write_summary(tmp_path / name, {"name": name, "status": status, "error": error,
                                        "overrides": [f"algo.beta={beta}"]})
    assert sweep_messages.failed_jobs(tmp_path, ["algo.beta"]) == [
        "rlexp: error: [β=0.04] reward x raised ValueError: y at step 2",
        "rlexp: [β=0.1] preempted (SIGTERM) after step 3"]
    assert sweep_messages.end_of_sweep(tmp_path) == 1
    assert capsys.readouterr().err.count("\n") == 2
    for name in ("b", "c"):
        (tmp_path / name / "summary.json").unlink()
    assert sweep_messages.end_of_sweep(tmp_path) == 0
    assert sweep_messages.end_of_sweep(tmp_path / "never-made") == 0

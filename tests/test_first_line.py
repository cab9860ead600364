"""Starts that speak: `python -m rlexp`, piped, says it started before anything is imported or
built (bench/first_line.py measures how soon: 0.2-0.3 s here); --help and --cfg stay clean."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

TINY = ["train.steps=2", "eval.num_samples=4", "dataset.num_eval=4", "eval.pass_k=1",
        "tracker=none"]


def first_line(args: list[str], cwd) -> tuple[str, float]:
    """The first line on stderr (where rlexp's lines go), piped, and when it came; the
    process (group) is stopped right after: nothing compiles."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "rlexp", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        line = proc.stderr.readline()
        return line.rstrip("\n"), time.monotonic() - started
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.parametrize("args,said", [
    (TINY, "rlexp: starting a run: reading the config"),
    (["-m", "train.seed=0,1", *TINY], "rlexp: starting a sweep: reading the config"),
])
def test_the_first_line_comes_before_the_model_builds(args, said, tmp_path):
    line, took = first_line(args, tmp_path)
    # the first line of all: before the config, the engine and the warm start say anything
    assert line == said
    assert took < 30  # measured 0.2-0.3 s (bench/first_line.py); generous for a loaded CI


def test_help_and_cfg_print_only_their_answer(tmp_path):
    for args in (["--help"], ["--cfg", "job", "train.steps=2"]):
        proc = subprocess.run([sys.executable, "-m", "rlexp", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert "rlexp: starting" not in proc.stdout + proc.stderr

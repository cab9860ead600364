"""run.profile_steps values that would trace nothing are refused in one line (exit 2). The
trace itself (an .xplane.pb and a Perfetto file under <run dir>/profile, logged as the run's
artifact `profile`) is held by tests/test_stopping.py on a real tiny engine.

MaxText's seed 002 (grpo_demo.py, `--profiler` default xplane; grpo.yml at a703dfd6a:
skip_first_n_steps_for_profiler 5, profiler_steps 3, 0-based) traces steps 5..7 of its
0-based loop: run.profile_steps=[6, 8] here (1-based global steps).
"""

from __future__ import annotations

import pytest

from helpers import cli, one_line_exit_2


@pytest.mark.parametrize(("value", "needles"), [
    ("[5,8]", ["run.profile_steps=[5, 8] is invalid", "past train.steps=3", "[1, 3]"]),
    ("[3,2]", ["run.profile_steps=[3, 2] is invalid", "[first, last] with first <= last"]),
    ("[0,2]", ["run.profile_steps.0=0 is invalid", "[1, inf)"]),
])
def test_profile_steps_that_trace_nothing_are_refused_in_one_line(tmp_path, value, needles):
    proc = cli(f"run.profile_steps={value}", "train.steps=3", "run.dry_run=true",
               "tracker=none", cwd=tmp_path)
    one_line_exit_2(proc, *needles)

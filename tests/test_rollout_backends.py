"""Rollout backends: the engine is chosen once, by rollout.name, and a new one is one file.

- Outside the backends' own modules (rlexp/config/rollouts/, rlexp/engine/rollout/) no code of
  src/ or launchers/ branches on which rollout engine runs: no comparison with an engine's name
  or with rollout.name (the answer is `rollout_spec(cfg)` / `rollout_backend(cfg)`).
- A backend written here, in this file (RecordingSpec and its engine half, which record every
  call and delegate to vanilla's), is selected with `rollout=recording` from a config dir of
  this test's and trains 2 steps of the launchers' tiny run: no other file changes.
"""

from __future__ import annotations

import ast
import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest

from rlexp.config.rollouts.vanilla import VanillaSpec
from rlexp.engine.rollout.vanilla import Rollout, VanillaBackend
from helpers import cli
from sweep_helpers import TINY

ROOT = Path(__file__).resolve().parents[1]
# The backends' own modules: where which engine runs is the question.
BACKENDS = (ROOT / "src" / "rlexp" / "config" / "rollouts",
            ROOT / "src" / "rlexp" / "engine" / "rollout")
ENGINES = {"vanilla", "vllm", "vllm_tpu"}
# Where RecordingRollout writes what it was asked (one JSON line a call).
RECORD_ENV = "RLEXP_TEST_RECORD"


def engine_branches(path: Path) -> list[str]:
    """`file:line: code` of each comparison in `path` that asks which rollout engine runs: an
    operand is an engine's name (or a tuple/list/set of them) or ends in `rollout.name`; and
    each use of the old `on_tunix_engine`."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            names = [e for o in operands
                     for e in (o.elts if isinstance(o, (ast.Tuple, ast.List, ast.Set)) else [o])
                     if isinstance(e, ast.Constant) and e.value in ENGINES]
            if names or any(ast.unparse(o).endswith("rollout.name") for o in operands):
                found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, (ast.Name, ast.Attribute)) and \
                (node.id if isinstance(node, ast.Name) else node.attr) == "on_tunix_engine":
            found.append(f"{path}:{node.lineno}: on_tunix_engine")
    return found


def scanned(root: Path) -> list[Path]:
    files = [*sorted((root / "src").rglob("*.py")), *sorted((root / "launchers").rglob("*.py"))]
    return [f for f in files if not any(f.is_relative_to(b) for b in BACKENDS)]


def test_no_code_outside_the_backends_branches_on_the_engine():
    found = [hit for path in scanned(ROOT) for hit in engine_branches(path)]
    assert found == [], "\n".join(found)


def test_the_scan_finds_each_kind_of_engine_branch(tmp_path):
    """The scan's negative controls: the shapes the engine used to be chosen by."""
    code = ('if cfg.rollout.name == "vllm": pass\n'
            'if r.name != "vanilla" and x: pass\n'
            'if cfg.rollout.name in ("vanilla", "vllm"): pass\n'
            'tpu = on_tunix_engine(cfg)\n'
            'ok = spec.name == "other" or cfg.model.name == "tiny"\n')
    (tmp_path / "m.py").write_text(code)
    lines = sorted(int(h.split(": ", 1)[0].rsplit(":", 1)[1])
                   for h in engine_branches(tmp_path / "m.py"))
    assert lines == [1, 2, 3, 4]


# ----------------------------------------------------------- a backend of the test's own


def record(call: str, **what: Any) -> None:
    with open(os.environ[RECORD_ENV], "a") as f:
        f.write(json.dumps({"call": call, **what}) + "\n")


class RecordingSpec(VanillaSpec):
    """Tunix's sampler under another name, its engine half below."""

    engine = f"{__name__}.RecordingBackend"


class RecordingBackend(VanillaBackend):
    def configs(self) -> dict[Any, Any]:
        record("configs")
        return super().configs()

    def eval_sampling(self, greedy: bool) -> dict[str, Any]:
        record("eval_sampling", greedy=greedy)
        return super().eval_sampling(greedy)

    def engine(self) -> Any:
        return functools.partial(RecordingRollout, keys=self.keys,
                                 temperature=self.cfg.rollout.temperature)


class RecordingRollout(Rollout):
    def generate(self, prompts: list[str], rollout_config: Any, **kwargs: Any) -> Any:
        record("generate", prompts=len(prompts))
        return super().generate(prompts, rollout_config, **kwargs)

    def update_params(self, params: Any, filter_types: Any = None) -> None:
        record("update_params")
        super().update_params(params, filter_types)


@pytest.mark.slow
def test_a_backend_of_ones_own_trains_two_steps(tmp_path):
    conf = tmp_path / "conf" / "rollout"
    conf.mkdir(parents=True)
    (conf / "recording.yaml").write_text(
        f"defaults:\n  - vanilla\n  - _self_\nname: {__name__}.RecordingSpec\n")
    calls = tmp_path / "calls.jsonl"
    # The launchers' tiny run (no warm start: the calls, not the learning, are the point), so
    # its programs are among those tests' runs put in the session's compilation cache; with
    # log-probs asked at both steps (logprob_gap_every=1) its sampler compiles one program.
    proc = cli("--config-dir", str(tmp_path / "conf"), "rollout=recording", *TINY,
               "rollout.logprob_gap_every=1", "tracker=none", cwd=tmp_path, timeout=900,
               env={RECORD_ENV: str(calls), "PYTHONPATH": os.pathsep.join(
                   [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = [json.loads(line) for line in calls.read_text().splitlines()]
    kinds = [c["call"] for c in got]
    assert kinds[0] == "configs" and kinds.count("configs") == 1  # chosen once, at the build
    assert "update_params" not in kinds  # colocated on one mesh: the sampler shares the weights
    evals = [c["greedy"] for c in got if c["call"] == "eval_sampling"]
    assert True in evals  # evaluation's greedy pass set its sampling here
    # every training step's and evaluation pass's sampler calls came here
    assert kinds.count("generate") >= 2 + len(evals)

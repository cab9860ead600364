"""Model FLOPs of a training step and the model-FLOPs utilization (MFU) they give. PaLM's
convention (Chowdhery et al. 2022, appendix B; nanoGPT's estimate_mfu): a training token costs
6N + 12·L·H·Q·T FLOPs (L layers, H query heads of width Q, sequence length T). Only the policy
update is counted (not sampling nor reference passes): `perf/mfu` is a lower bound."""

from __future__ import annotations

from rlexp.config.schema import Config
from rlexp.planning.memory import param_count


def train_flops_per_token(n_params: int, num_layers: int, num_heads: int, head_dim: int,
                          seq_len: int) -> float:
    """6N + 12·L·H·Q·T (PaLM appendix B)."""
    return 6.0 * n_params + 12.0 * num_layers * num_heads * head_dim * seq_len


def step_flops(cfg: Config, sequences: int) -> float:
    """Model FLOPs of one global step's policy update over `sequences` completions."""
    m, r = cfg.model, cfg.rollout
    seq = r.max_prompt_length + r.max_completion_length
    per_token = train_flops_per_token(param_count(m), m.num_layers, m.num_heads, m.head_dim, seq)
    return per_token * seq * sequences * cfg.algo.num_iterations


def utilization(flops: float, seconds: float, peak_tflops: float | None) -> dict[str, float]:
    """{'perf/tflops': achieved TFLOP/s, 'perf/mfu': fraction of `peak_tflops`} ({} if no time);
    no perf/mfu without a known peak (a nominal one would make it a rescaled perf/tflops)."""
    if seconds <= 0:
        return {}
    tflops = flops / seconds / 1e12
    if peak_tflops is None or peak_tflops <= 0:
        return {"perf/tflops": tflops}
    return {"perf/tflops": tflops, "perf/mfu": tflops / peak_tflops}


def peak_tflops(cfg: Config) -> float | None:
    """The devices' datasheet bf16 peak; None without one or when emulated on CPU."""
    if cfg.hardware.peak_bf16_tflops is None or cfg.hardware.emulate:
        return None
    mesh = cfg.hardware.trainer_mesh
    return cfg.hardware.peak_bf16_tflops * mesh.fsdp * mesh.tp

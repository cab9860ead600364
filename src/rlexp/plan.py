"""The plan of a run, worked out before anything compiles: model size, meshes, memory, I/O.

`run.dry_run=true` prints it; a plan that cannot fit stops the run with exit 2.
(Minimal version: the hardware issue extends the memory plan.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlexp.config import Config, ModelConfig


def param_count(m: ModelConfig) -> int:
    """Parameters of a Llama/Qwen3-style decoder from its architecture numbers."""
    attn = m.embed_dim * m.head_dim * (m.num_heads * 2 + m.num_kv_heads * 2)
    mlp = 3 * m.embed_dim * m.hidden_dim
    norms = 2 * m.embed_dim + (2 * m.head_dim if m.family == "qwen3" else 0)
    per_layer = attn + mlp + norms
    embed = m.vocab_size * m.embed_dim * (1 if m.tie_embeddings else 2)
    return m.num_layers * per_layer + embed + m.embed_dim


@dataclass
class Plan:
    # Parameters of the policy model.
    params: int
    # Human-readable lines describing the run (printed by dry_run).
    lines: list[str] = field(default_factory=list)
    # Bytes per device by item (policy, reference, optimizer, ...).
    memory: dict[str, float] = field(default_factory=dict)
    # False when the run cannot fit the hardware.
    fits: bool = True
    # One line saying why it cannot fit.
    why: str = ""


def make_plan(cfg: Config) -> Plan:
    n = param_count(cfg.model)
    t, a, h = cfg.train, cfg.algo, cfg.hardware
    lines = [
        f"model      {cfg.model.name} ({cfg.model.family}, {n / 1e6:.2f}M parameters, {cfg.model.dtype})",
        f"algo       {a.name}: beta={a.beta} epsilon={a.epsilon} epsilon_high={a.epsilon_high} "
        f"G={a.num_generations} mu={a.num_iterations} kl={a.kl_estimator}",
        f"hardware   {h.name}: {h.devices} {h.platform} device(s), {h.hosts} host(s); "
        f"trainer mesh (fsdp={h.trainer_mesh.fsdp}, tp={h.trainer_mesh.tp}), "
        f"rollout mesh (fsdp={h.rollout_mesh.fsdp}, tp={h.rollout_mesh.tp})",
        f"train      {t.steps} steps x {t.batch_size} prompts x {a.num_generations} completions, "
        f"lr={t.learning_rate}",
        f"dataset    {cfg.dataset.name} ({cfg.dataset.num_train} train / {cfg.dataset.num_eval} eval)",
    ]
    return Plan(params=n, lines=lines)

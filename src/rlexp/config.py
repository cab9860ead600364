"""Typed schema of every config group, registered in Hydra's ConfigStore.

YAML files under conf/ hold values; these dataclasses say which keys exist, their types and
what is valid. `to_config()` converts a composed DictConfig into `Config` once, at the entry
point; nothing below the entry point sees a DictConfig.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from rlexp.errors import UserError

# ----------------------------------------------------------------------------------- groups


@dataclass
class ModelConfig:
    # Short name of the model profile (the option chosen in conf/model/).
    name: str = "tiny"
    # Architecture family, picks Tunix's model code: qwen3 | llama3.
    family: str = "qwen3"
    # Local directory with HF safetensors + config.json; None = random init (tiny only).
    path: Optional[str] = None
    # Transformer blocks.
    num_layers: int = 2
    # Width of the residual stream (HF hidden_size).
    embed_dim: int = 64
    # Query heads.
    num_heads: int = 4
    # Key/value heads (grouped-query attention).
    num_kv_heads: int = 2
    # Width of one attention head.
    head_dim: int = 16
    # Width of the MLP's hidden layer (HF intermediate_size).
    hidden_dim: int = 128
    # Vocabulary size of the embedding table.
    vocab_size: int = 64
    # RoPE base frequency.
    rope_theta: float = 1000000.0
    # Whether the output projection reuses the embedding table.
    tie_embeddings: bool = True
    # RMSNorm epsilon.
    norm_eps: float = 1e-6
    # Longest context the model was trained for.
    max_position: int = 512
    # Parameter dtype: float32 | bfloat16.
    dtype: str = "float32"
    # Tokenizer: char (built in, offline) | hf (tokenizer.json in model.path).
    tokenizer: str = "char"
    # Wrap prompts in the tokenizer's chat template (instruct checkpoints).
    chat_template: bool = False
    # Supervised warm-start steps on reference answers before RL (0 = none); cached.
    warm_start_steps: int = 0
    # Learning rate of the warm-start stage.
    warm_start_lr: float = 3e-3
    # Sequences per warm-start step.
    warm_start_batch_size: int = 32


@dataclass
class AlgoConfig:
    # Policy-gradient variant: grpo (token-level ratio) | gspo (sequence-level ratio).
    name: str = "grpo"
    # Weight of the KL penalty to the reference model (0 drops the reference model).
    beta: float = 0.04
    # Lower clip range of the importance ratio: ratio >= 1 - epsilon.
    epsilon: float = 0.2
    # Upper clip range: ratio <= 1 + epsilon_high (DAPO clip-higher); None = epsilon.
    epsilon_high: Optional[float] = None
    # Completions sampled per prompt (the group of group-relative advantages).
    num_generations: int = 4
    # Policy updates per rollout batch (mu); 1 = on-policy, the ratio is then exactly 1.
    num_iterations: int = 1
    # KL estimator: k1 (log-ratio) | k2 (squared log-ratio / 2) | k3 (Schulman's unbiased).
    kl_estimator: str = "k3"
    # Loss aggregation: token-mean | sequence-mean-token-mean | sequence-mean-token-sum.
    loss_agg: str = "sequence-mean-token-mean"


@dataclass
class MeshConfig:
    # Fully-sharded data-parallel axis size.
    fsdp: int = 1
    # Tensor-parallel axis size.
    tp: int = 1


@dataclass
class HardwareConfig:
    # Profile name (the option chosen in conf/hardware/).
    name: str = "cpu"
    # JAX platform the profile expects: cpu | tpu | gpu.
    platform: str = "cpu"
    # Accelerator type as the scheduler names it (TPU type for xpk, GPU model for SLURM).
    accelerator_type: str = "cpu"
    # Physical chips in the slice (a TPU v5p chip has two cores but is one JAX device).
    chips: int = 1
    # JAX devices visible to the job over all hosts.
    devices: int = 1
    # Hosts (processes); > 1 calls jax.distributed.initialize.
    hosts: int = 1
    # High-bandwidth memory per JAX device, GiB.
    hbm_gib_per_device: float = 24.0
    # Peak dense bf16 throughput per device, TFLOP/s (for MFU).
    peak_bf16_tflops: float = 1.0
    # Regex that jax.Device.device_kind must fully match ("TPU v6 lite"); None = any kind.
    device_kind: Optional[str] = None
    # GPU model when platform=gpu (h100 | h200): picks HBM, peak and kind from gpu_specs.
    gpu_type: Optional[str] = None
    # Datasheet figures per GPU model (hbm_gib, peak_bf16_tflops, device_kind, ...), which
    # conf/hardware/gpu.yaml interpolates by gpu_type; empty off GPU.
    gpu_specs: dict[str, Any] = field(default_factory=dict)
    # Mesh of the trainer (policy + reference).
    trainer_mesh: MeshConfig = field(default_factory=MeshConfig)
    # Mesh of the rollout (sampler).
    rollout_mesh: MeshConfig = field(default_factory=MeshConfig)
    # colocated: trainer and sampler share all devices | split: disjoint device fractions.
    split: str = "colocated"
    # Fraction of devices for the trainer when split (MaxText trainer_devices_fraction).
    trainer_fraction: float = 1.0
    # Fraction of devices for the sampler when split (MaxText sampler_devices_fraction).
    sampler_fraction: float = 1.0
    # Run the profile's meshes on virtual CPU devices (sharding tested without the chips).
    emulate: bool = False
    # SLURM: CPUs per task for a job on this hardware.
    cpus_per_task: int = 2
    # SLURM: GPUs per node (0 for CPU/TPU).
    gpus_per_node: int = 0
    # SLURM: wall-clock limit per job, minutes.
    timeout_min: int = 60
    # SLURM partition; None = cluster default.
    partition: Optional[str] = None
    # Memory the host may use for this job, GiB (CPU memory plan).
    host_memory_gib: float = 24.0


@dataclass
class DatasetConfig:
    # Dataset option: arithmetic | gsm_symbolic | gsm8k.
    name: str = "arithmetic"
    # Local jsonl/json/parquet file (gsm8k); None = the hub dataset (needs network).
    path: Optional[str] = None
    # Training prompts drawn (procedural datasets) or kept (files).
    num_train: int = 2000
    # Held-out prompts, disjoint from training.
    num_eval: int = 64
    # Seed of generation and shuffling; fixed across swept jobs for paired comparisons.
    seed: int = 1234
    # reasoning-gym difficulty: number of terms in an arithmetic expression.
    min_terms: int = 2
    # reasoning-gym difficulty: most terms.
    max_terms: int = 2
    # reasoning-gym difficulty: fewest digits per number.
    min_digits: int = 1
    # reasoning-gym difficulty: most digits per number.
    max_digits: int = 1
    # Prompt template: reasoning (<reasoning>/<answer> tags) | answer (<answer> tag only).
    template: str = "answer"
    # reasoning-gym arithmetic: operators drawn from, a subset of "+-*/".
    operators: str = "+-"
    # reasoning-gym arithmetic: allow unary minus on terms ("3 - -2").
    allow_negation: bool = False
    # reasoning-gym arithmetic: allow parenthesised sub-expressions.
    allow_parentheses: bool = False


@dataclass
class RolloutConfig:
    # Rollout engine: vanilla (Tunix's sampler) | vllm (needs vllm/tpu-inference installed).
    name: str = "vanilla"
    # Sampling temperature for training rollouts.
    temperature: float = 1.0
    # Nucleus sampling mass; None = off.
    top_p: Optional[float] = None
    # Top-k sampling; None = off.
    top_k: Optional[int] = None
    # Longest prompt in tokens (longer prompts are left-truncated).
    max_prompt_length: int = 32
    # Tokens generated per completion.
    max_completion_length: int = 8
    # KV-cache size in tokens (prompt + completion + slack).
    kv_cache_size: int = 64
    # vllm: tensor-parallel size.
    tensor_parallel_size: int = 1
    # vllm: data-parallel size.
    data_parallel_size: int = 1
    # vllm: fraction of HBM vLLM may take.
    hbm_utilization: float = 0.4


@dataclass
class TrackerConfig:
    # mlflow | none.
    name: str = "mlflow"
    # Tracking URI; None = $MLFLOW_TRACKING_URI or sqlite:///outputs/mlflow.db.
    uri: Optional[str] = None
    # MLflow experiment name.
    experiment: str = "rlexp"
    # Seconds between buffered writes of metrics.
    flush_every_s: float = 5.0


@dataclass
class RewardConfig:
    # Weight of the exact-format reward (<answer>…</answer> alone, in order).
    format_exact: float = 0.5
    # Weight of the approximate-format reward (right tags present, partial credit).
    format_approx: float = 0.25
    # Weight of the exact-answer reward.
    answer_exact: float = 1.0
    # Weight of numeric closeness (within 10% / 20%).
    answer_close: float = 0.5
    # Weight of math-verify equivalence (0 = off; needs the math-verify package).
    math_verify: float = 0.0


@dataclass
class TrainConfig:
    # RL steps (one rollout batch each).
    steps: int = 60
    # Prompts per step; completions per step = batch_size * num_generations.
    batch_size: int = 8
    # Prompts per policy update (mini-batch); None = batch_size.
    mini_batch_size: Optional[int] = None
    # Prompts per gradient accumulation slice; None = mini_batch_size.
    micro_batch_size: Optional[int] = None
    # Peak learning rate.
    learning_rate: float = 3e-3
    # constant | cosine | warmup_cosine.
    lr_schedule: str = "constant"
    # Linear warm-up steps (warmup_cosine).
    warmup_steps: int = 0
    # Global gradient-norm clip; 0 = off.
    grad_clip: float = 1.0
    # AdamW weight decay.
    weight_decay: float = 0.0
    # Seed of init, sampling and data order; shared by jobs of a sweep unless swept.
    seed: int = 0
    # Save a checkpoint every N steps; 0 = only at the end.
    checkpoint_every: int = 0
    # Checkpoints kept on disk.
    keep_checkpoints: int = 2


@dataclass
class EvalConfig:
    # Evaluate every N steps (and always before and after); 0 = only before and after.
    every: int = 0
    # Held-out prompts per evaluation (<= dataset.num_eval).
    num_samples: int = 64
    # k of pass@k (k sampled completions per prompt).
    pass_k: int = 4
    # Temperature of the sampled pass (greedy pass is temperature 0).
    temperature: float = 1.0
    # Sample completions kept per evaluation (logged as a table).
    keep_samples: int = 8


@dataclass
class RunConfig:
    # Print the plan (model, mesh, memory, steps, outputs) and exit without compiling.
    dry_run: bool = False
    # Resume from the latest checkpoint of this run dir when one exists.
    resume: bool = True
    # Show a progress bar.
    progress: bool = True
    # Cache shared by runs (warm-start weights keyed by what determines them).
    cache_dir: str = "outputs/cache"


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    tracker: TrackerConfig = field(default_factory=TrackerConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    run: RunConfig = field(default_factory=RunConfig)




def register_configs() -> None:
    """Store the schema `base_config` (first in config.yaml's defaults) and the sweeps."""
    from rlexp.paths import sweeps_dir

    cs = ConfigStore.instance()
    # The root schema types every group's node, so group YAML files need no schema of their own.
    cs.store(name="base_config", node=Config)
    # sweeps/*.yaml become the `sweep` group (+sweep=NAME), from the wheel or the checkout.
    found = sweeps_dir()
    for path in sorted(found.glob("*.yaml")) if found else []:
        cs.store(group="sweep", name=path.stem, node=OmegaConf.load(path), package="_global_")


# ------------------------------------------------------------------------------ validation

CHOICES = {
    "model.family": ("qwen3", "llama3"),
    "model.dtype": ("float32", "bfloat16"),
    "model.tokenizer": ("char", "hf"),
    "algo.name": ("grpo", "gspo"),
    "algo.kl_estimator": ("k1", "k2", "k3"),
    "algo.loss_agg": ("token-mean", "sequence-mean-token-mean", "sequence-mean-token-sum"),
    "hardware.platform": ("cpu", "tpu", "gpu"),
    "hardware.split": ("colocated", "split"),
    "dataset.name": ("arithmetic", "gsm_symbolic", "gsm8k"),
    "dataset.template": ("reasoning", "answer"),
    "rollout.name": ("vanilla", "vllm"),
    "tracker.name": ("mlflow", "none"),
    "train.lr_schedule": ("constant", "cosine", "warmup_cosine"),
}


def _get(cfg: Config, dotted: str) -> Any:
    obj: Any = cfg
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _require(ok: bool, key: str, value: Any, rule: str) -> None:
    if not ok:
        raise UserError(f"{key}={value!r} is invalid: {rule}")


def validate(cfg: Config) -> Config:
    """Cross-field checks the types alone cannot express. Raises UserError (exit 2)."""
    for key, choices in CHOICES.items():
        value = _get(cfg, key)
        _require(value in choices, key, value, f"valid choices are {', '.join(choices)}")
    a, t, r, e, m = cfg.algo, cfg.train, cfg.rollout, cfg.eval, cfg.model
    _require(a.num_generations >= 2, "algo.num_generations", a.num_generations,
             "must be >= 2 (group-relative advantages need at least two completions)")
    _require(0 < a.epsilon < 1, "algo.epsilon", a.epsilon, "must be in (0, 1)")
    if a.epsilon_high is not None:
        _require(a.epsilon <= a.epsilon_high < 1, "algo.epsilon_high", a.epsilon_high,
                 f"must be >= algo.epsilon ({a.epsilon}) and < 1")
    _require(a.beta >= 0, "algo.beta", a.beta, "must be >= 0")
    _require(a.num_iterations >= 1, "algo.num_iterations", a.num_iterations, "must be >= 1")
    _require(t.steps >= 1, "train.steps", t.steps, "must be >= 1")
    _require(t.batch_size >= 1, "train.batch_size", t.batch_size, "must be >= 1")
    _require(t.learning_rate > 0, "train.learning_rate", t.learning_rate, "must be > 0")
    _require(t.grad_clip >= 0, "train.grad_clip", t.grad_clip, "must be >= 0 (0 = off)")
    _require(t.checkpoint_every >= 0, "train.checkpoint_every", t.checkpoint_every, "must be >= 0")
    _require(t.keep_checkpoints >= 1, "train.keep_checkpoints", t.keep_checkpoints, "must be >= 1")
    mini = t.mini_batch_size or t.batch_size
    micro = t.micro_batch_size or mini
    _require(t.batch_size % mini == 0, "train.mini_batch_size", t.mini_batch_size,
             f"must divide train.batch_size ({t.batch_size})")
    _require(mini % micro == 0, "train.micro_batch_size", t.micro_batch_size,
             f"must divide the mini-batch size ({mini})")
    _require(r.temperature > 0, "rollout.temperature", r.temperature, "must be > 0")
    if r.top_p is not None:
        _require(0 < r.top_p <= 1, "rollout.top_p", r.top_p, "must be in (0, 1]")
    if r.top_k is not None:
        _require(r.top_k >= 1, "rollout.top_k", r.top_k, "must be >= 1")
    _require(r.max_completion_length >= 1, "rollout.max_completion_length",
             r.max_completion_length, "must be >= 1")
    _require(r.kv_cache_size >= r.max_prompt_length + r.max_completion_length,
             "rollout.kv_cache_size", r.kv_cache_size,
             "must be >= rollout.max_prompt_length + rollout.max_completion_length")
    _require(e.every >= 0, "eval.every", e.every, "must be >= 0 (0 = only before and after)")
    _require(e.pass_k >= 1, "eval.pass_k", e.pass_k, "must be >= 1")
    _require(1 <= e.num_samples <= cfg.dataset.num_eval, "eval.num_samples", e.num_samples,
             f"must be in [1, dataset.num_eval={cfg.dataset.num_eval}]")
    _require(cfg.dataset.num_train >= t.batch_size, "dataset.num_train", cfg.dataset.num_train,
             f"must be >= train.batch_size ({t.batch_size})")
    d = cfg.dataset
    _require(bool(d.operators) and set(d.operators) <= set("+-*/"), "dataset.operators",
             d.operators, "must be a non-empty subset of '+-*/'")
    _require(m.warm_start_steps >= 0, "model.warm_start_steps", m.warm_start_steps, "must be >= 0")
    _require(m.warm_start_batch_size >= 1, "model.warm_start_batch_size",
             m.warm_start_batch_size, "must be >= 1")
    _require(m.warm_start_lr > 0, "model.warm_start_lr", m.warm_start_lr, "must be > 0")
    _require(1 <= d.min_terms <= d.max_terms, "dataset.max_terms", d.max_terms,
             f"must be >= dataset.min_terms ({d.min_terms}) >= 1")
    _require(1 <= d.min_digits <= d.max_digits, "dataset.max_digits", d.max_digits,
             f"must be >= dataset.min_digits ({d.min_digits}) >= 1")
    h = cfg.hardware
    _require(h.devices >= 1 and h.hosts >= 1, "hardware.devices", h.devices, "must be >= 1")
    for role in ("trainer_mesh", "rollout_mesh"):
        mesh = getattr(h, role)
        size = mesh.fsdp * mesh.tp
        frac = h.trainer_fraction if role == "trainer_mesh" else h.sampler_fraction
        avail = h.devices if h.split == "colocated" else int(round(h.devices * frac))
        _require(size == avail, f"hardware.{role}", f"fsdp={mesh.fsdp},tp={mesh.tp}",
                 f"fsdp*tp must equal the {avail} devices this role gets")
    if h.split == "split":
        _require(h.trainer_fraction + h.sampler_fraction <= 1.0 + 1e-9, "hardware.sampler_fraction",
                 h.sampler_fraction, "trainer_fraction + sampler_fraction must be <= 1")
    if h.gpu_specs:
        _require(h.gpu_type in h.gpu_specs, "hardware.gpu_type", h.gpu_type,
                 f"valid choices are {', '.join(sorted(h.gpu_specs))}")
    _require(h.hbm_gib_per_device > 0, "hardware.hbm_gib_per_device", h.hbm_gib_per_device,
             "must be > 0")
    return cfg


# ------------------------------------------------------------------------------ conversion


def _sub_schema(schema: type, name: str) -> type | None:
    """The dataclass of field `name` of `schema` (None for a leaf or an unknown name)."""
    match = next((f for f in dataclasses.fields(schema) if f.name == name), None)
    if match is None:
        return None
    cls = globals().get(match.type if isinstance(match.type, str) else match.type.__name__)
    return cls if dataclasses.is_dataclass(cls) else None


def unknown_key_message(dotted: str) -> str:
    """'algo.clip is not a config key; valid keys under algo are: ...' (from the schema)."""
    schema: type = Config
    parts = dotted.split(".")
    for i, part in enumerate(parts[:-1]):
        sub = _sub_schema(schema, part)
        if sub is None:  # the unknown part is higher up the path
            dotted = ".".join(parts[: i + 1])
            break
        schema = sub
    parent = dotted.rsplit(".", 1)[0] if "." in dotted else "the top level"
    valid = sorted(f.name for f in dataclasses.fields(schema))
    return f"{dotted} is not a config key; valid keys under {parent} are: {', '.join(valid)}"


def _unknown_keys(node: DictConfig, schema: type, prefix: str) -> list[str]:
    """Keys present in the composed config that the schema lacks (e.g. `+algo.clip_eps=1`)."""
    names = {f.name for f in dataclasses.fields(schema)}
    bad = []
    for key in node.keys():
        dotted = f"{prefix}{key}"
        if key not in names:
            bad.append(dotted)
            continue
        sub = _sub_schema(schema, key)
        if sub is not None and isinstance(node._get_node(key), DictConfig):
            bad.extend(_unknown_keys(node._get_node(key), sub, dotted + "."))
    return bad


def to_config(cfg: DictConfig) -> Config:
    """Composed DictConfig (without its `hydra` node) -> validated `Config` dataclass."""
    plain = OmegaConf.masked_copy(cfg, [k for k in cfg.keys() if k != "hydra"]) \
        if "hydra" in cfg else cfg
    unknown = _unknown_keys(plain, Config, "")
    if unknown:
        raise UserError(unknown_key_message(unknown[0]))
    try:
        obj = OmegaConf.to_object(plain)
    except Exception as exc:  # interpolation or type errors surfacing late
        raise UserError(one_line_omegaconf_error(exc)) from None
    if not isinstance(obj, Config):  # composed without the schema (should not happen)
        obj = Config(**{k: v for k, v in obj.items()})
    return validate(obj)


def one_line_omegaconf_error(exc: BaseException) -> str:
    """OmegaConf errors are multi-line ('full_key: ...'); keep what a user needs."""
    full_key = getattr(exc, "full_key", None)
    msg = str(getattr(exc, "msg", None) or exc).splitlines()[0].strip()
    return f"{full_key}: {msg}" if full_key else msg

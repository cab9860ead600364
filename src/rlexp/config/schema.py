"""Typed schema of every config group, registered in Hydra's ConfigStore.

YAML files under conf/ hold values; these dataclasses say which keys exist, their types and
what is valid. `to_config()` converts a composed DictConfig into `Config` once, at the entry
point; nothing below the entry point sees a DictConfig.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from rlexp.algo.algorithm import algorithms
from rlexp.base.errors import UserError

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
    # Compute dtype (activations, matmuls, the sampler's KV cache): float32 | bfloat16.
    dtype: str = "float32"
    # Dtype of the trained weights and AdamW's moments (MaxText's weight_dtype): float32 keeps
    # a float32 master copy that small updates can change (bf16 has 8 mantissa bits: a 5e-6
    # AdamW step changed 0.98% of SmolLM2's bf16 weights), the forward casts to model.dtype.
    param_dtype: str = "float32"
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
    # Algorithm of rlexp.algo.variants: grpo | gspo | dapo | dr_grpo, or a dotted path to a
    # user's rlexp.algo.algorithm.Algorithm (its ratio level and advantage estimator; everything
    # else is the settings below).
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
    # Loss aggregation: token-mean | sequence-mean-token-mean | sequence-mean-token-sum |
    # sequence-mean-token-scale (Dr.GRPO: token sums / the completion budget). TRL's
    # loss_type: grpo = sequence-mean-token-mean, dapo = token-mean, dr_grpo = ...-token-scale.
    loss_agg: str = "sequence-mean-token-mean"
    # Importance ratio per token (GRPO) or per sequence (GSPO; TRL importance_sampling_level);
    # None = the algorithm's own.
    ratio_level: Optional[str] = None
    # Advantage std scaling (TRL scale_rewards): group | batch | none (Dr.GRPO). batch = the
    # rewards Tunix scores in one call (rollout micro-batches merged, at most a mini-batch).
    scale_rewards: str = "group"
    # Drop completions that hit the budget without EOS from the loss (TRL
    # mask_truncated_completions).
    mask_truncated: bool = False
    # Drop groups whose rewards are all equal from the loss (DAPO dynamic sampling, without
    # DAPO's re-sampling: the step trains on fewer groups).
    dynamic_sampling: bool = False
    # DAPO overlong shaping: share of the completion budget (its last tokens) over which a
    # penalty grows linearly to -overlong_penalty (the paper: 4096 of 20480 = 0.2); 0 = off.
    overlong_buffer: float = 0.0
    # DAPO overlong shaping: weight of the penalty (logged as train/reward/overlong).
    overlong_penalty: float = 1.0


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
    # Name of the dataset option (conf/dataset/<name>.yaml, packaged or in a --config-dir).
    name: str = "arithmetic"
    # Builder fn(DatasetConfig) -> RawSplits, or rows (dicts) that the field mapping,
    # extractor and held-out split below turn into problems. Dotted import path (Hydra's
    # _target_ convention): rlexp.data.loaders.{arithmetic, gsm_symbolic, generic} or yours.
    _target_: str = "rlexp.data.loaders.arithmetic"
    # generic: local jsonl/json/parquet/csv file; None = `hub` (a `datasets` name).
    path: Optional[str] = None
    # generic: a datasets.load_dataset name (e.g. openai/gsm8k; needs network or the HF cache).
    hub: Optional[str] = None
    # generic: the hub dataset's configuration name (gsm8k: main).
    hub_config: Optional[str] = None
    # generic: split to train on (hub datasets).
    split: str = "train"
    # generic: split held out for evaluation; None = hold out rows of the training data.
    eval_split: Optional[str] = None
    # Share of the rows held out (never trained on) when there is no eval_split; None =
    # dataset.num_eval rows (at most half). At most dataset.num_eval of them are evaluated.
    eval_fraction: Optional[float] = None
    # generic: row field holding the question.
    question_field: str = "question"
    # generic: row field holding the reference answer (or a solution to extract it from).
    answer_field: str = "answer"
    # generic: row field holding worked reasoning (warm-start target); None = none, or the
    # text before '####' with extractor=gsm8k.
    reasoning_field: Optional[str] = None
    # Final answer from the answer field: none (as is) | gsm8k ('#### N') | boxed (last
    # \boxed{...}) | regex (answer_regex) | a dotted path fn(text) -> str or None.
    extractor: str = "none"
    # extractor=regex: pattern whose first group (or whole match) is the answer.
    answer_regex: Optional[str] = None
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
    # Tag around the working out with template=reasoning (think gives <think>...</think>).
    reasoning_tag: str = "reasoning"
    # Instruction under the question (system message with a chat template); None = the
    # template's own ("Answer between <answer> and </answer>." ...); "" = none.
    system_prompt: Optional[str] = None
    # User message with a {question} placeholder; None = question + instruction.
    prompt: Optional[str] = None
    # File holding `prompt` (read at start); wins over dataset.prompt.
    prompt_file: Optional[str] = None
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
    # Longest prompt in tokens (longer prompts are left-truncated). Real-model default from
    # MaxText's RL recipe (configs/post_train/rl.yml max_prefill_predict_length: 256).
    max_prompt_length: int = 256
    # Tokens generated per completion: room for <reasoning> and <answer> (MaxText rl.yml and
    # Tunix's grpo_demo: 768 generation steps).
    max_completion_length: int = 768
    # KV-cache size in tokens: prompt + completion + 256 slack (MaxText's kv_cache_buffer).
    kv_cache_size: int = 1280
    # Prompts per sampler call (and per reference/old log-prob pass); None = planned from
    # memory on an accelerator (rlexp.planning.memory.rollout_micro_prompts), the train micro batch on
    # the CPU. Smaller values cap the KV cache and prefill logits in the memory plan.
    micro_batch_size: Optional[int] = None
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
    # MLflow run name; None = what tells the run apart: a sweep job's swept values
    # ("beta=0.04,epsilon=0.2"), else the algo/model/dataset/hardware choices.
    run_name: Optional[str] = None
    # Extra MLflow run tags, e.g. +tracker.tags.team=rl (values are redacted like params).
    tags: dict[str, str] = field(default_factory=dict)
    # Seconds between samples of MLflow's system-metrics monitor (CPU, RAM, disk, network,
    # GPU via psutil/pynvml; accelerator memory from JAX); 0 = off.
    system_metrics_every_s: float = 10.0


@dataclass
class RewardFunctionConfig:
    # Dotted import path of fn(prompts, completions, answers, **kwargs) -> one float per
    # completion (Hydra's instantiate convention; a user package on PYTHONPATH works).
    _target_: str = "rlexp.rewards.answer_exact_reward"
    # Weight in the total reward (negative = a penalty; 0 = off).
    weight: float = 1.0
    # Logged as train/reward/<name>; None = the function's __name__.
    name: Optional[str] = None
    # Keyword arguments passed to the function on every call (besides template and
    # reasoning_tag, which every function gets from dataset.*).
    kwargs: dict[str, Any] = field(default_factory=dict)


def _builtin_rewards() -> list[RewardFunctionConfig]:
    # The default run's rewards (MaxText's GSM8K recipe: format + answer + closeness).
    return [RewardFunctionConfig("rlexp.rewards.format_exact_reward", 0.5, "format_exact"),
            RewardFunctionConfig("rlexp.rewards.format_approx_reward", 0.25, "format_approx"),
            RewardFunctionConfig("rlexp.rewards.answer_exact_reward", 1.0, "answer_exact"),
            RewardFunctionConfig("rlexp.rewards.answer_close_reward", 0.5, "answer_close")]


@dataclass
class RewardConfig:
    # Reward plug-ins, summed with their weights. Setting the list replaces it whole (Hydra
    # list semantics); one weight: reward.functions.2.weight=2. rlexp.rewards has
    # format_exact/format_approx/answer_exact/answer_close/math_verify _reward and
    # overlong_penalty.
    functions: list[RewardFunctionConfig] = field(default_factory=_builtin_rewards)


@dataclass
class EarlyStopConfig:
    # Metric watched (a key the loop logs, e.g. eval/accuracy or train/reward_mean); None = off.
    metric: Optional[str] = None
    # Checks of the metric without an improvement of min_delta before the run stops
    # (eval/* metrics are checked at each evaluation, train/* at each step).
    patience: int = 3
    # max: higher is better | min: lower is better.
    mode: str = "max"
    # Smallest change that counts as an improvement.
    min_delta: float = 0.0


@dataclass
class PruneConfig:
    # Prune sweep trials whose eval curve trails the other jobs': none | median (Optuna's
    # MedianPruner over the sweep's jobs; needs the optuna extra). Sweep jobs only.
    pruner: str = "none"
    # The curve compared, reported at each evaluation.
    metric: str = "eval/accuracy"
    # max: higher is better | min: lower is better.
    mode: str = "max"
    # Jobs that run to the end before any is pruned (MedianPruner n_startup_trials).
    startup_jobs: int = 2
    # Steps before a job may be pruned (MedianPruner n_warmup_steps).
    warmup_steps: int = 0


@dataclass
class TrainConfig:
    # RL steps (one rollout batch each).
    steps: int = 100
    # Prompts per step; completions per step = batch_size * num_generations (Tunix's GSM8K
    # GRPO configs use 8).
    batch_size: int = 8
    # Prompts per policy update (mini-batch); None = batch_size.
    mini_batch_size: Optional[int] = None
    # Prompts per gradient accumulation slice; None = mini_batch_size.
    micro_batch_size: Optional[int] = None
    # Peak learning rate. Real-model default 3e-6 (MaxText rl.yml, Tunix grpo_demo); the
    # tiny model's recipe (conf/recipe/tiny.yaml) uses 1e-3.
    learning_rate: float = 3e-6
    # constant | cosine | warmup_cosine.
    lr_schedule: str = "warmup_cosine"
    # Linear warm-up steps (warmup_cosine); the seeds warm up over 10% of the steps.
    warmup_steps: int = 10
    # Global gradient-norm clip; 0 = off (MaxText/Tunix GRPO recipes: 0.1, "important to
    # keep KL divergence in check").
    grad_clip: float = 0.1
    # AdamW weight decay (MaxText/Tunix GRPO recipes: 0.1).
    weight_decay: float = 0.1
    # Activation rematerialization of the training forward: none | full (recompute each
    # decoder layer in the backward pass) | dots_saveable (keep matmul outputs, recompute
    # the rest). The sampler never remats (Tunix's decoder remat crashed there). Real-model
    # default full, as MaxText's RL recipes remat (remat_policy: custom, with offloading).
    remat: str = "full"
    # Seed of init, sampling and data order; shared by jobs of a sweep unless swept.
    seed: int = 0
    # Save a checkpoint every N steps; 0 = only at the end.
    checkpoint_every: int = 0
    # Checkpoints kept on disk.
    keep_checkpoints: int = 2
    # Stop a run whose metric stalls (train.early_stop.metric=eval/accuracy to enable).
    early_stop: EarlyStopConfig = field(default_factory=EarlyStopConfig)
    # Stop sweep jobs that trail the others (train.prune.pruner=median).
    prune: PruneConfig = field(default_factory=PruneConfig)


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
    # Cache shared by runs: warm-start weights and generated problems keyed by what determines
    # them, JAX's compiled programs, converted models. $RLEXP_CACHE_DIR (when set) shares one
    # across project directories, e.g. export RLEXP_CACHE_DIR=~/.cache/rlexp.
    cache_dir: str = "${oc.env:RLEXP_CACHE_DIR,outputs/cache}"
    # JAX's persistent compilation cache under <cache_dir>/jax: a sweep's jobs and reruns
    # load compiled programs instead of compiling again (false = off; JAX_COMPILATION_CACHE_DIR
    # in the environment wins).
    compilation_cache: bool = True
    # Warm-start cache entries kept under cache_dir; the least recently used beyond this are
    # deleted when a run adds or uses one.
    cache_keep: int = 8
    # [first, last] global steps traced by the JAX profiler into <run dir>/profile (logged
    # as an artifact; TensorBoard/Perfetto read it); [] = off.
    profile_steps: list[int] = field(default_factory=list)
    # Fork: start from another run's newest checkpoint (its run dir, a checkpoint dir or its
    # MLflow run id) instead of model.path / random init + warm start; the origin is only read.
    init_from: Optional[str] = None
    # At the end of a finished run, write the policy as a Hugging Face dir (<run dir>/export:
    # safetensors, config.json, tokenizer) and log it to MLflow as artifact `model`.
    export: bool = True
    # Outputs that outlive the machine, e.g. gs://bucket/rlexp: checkpoints are written (and
    # resumed) under <output_uri>/<run name>/checkpoints; summary.json and export/ are copied
    # there at the end. null: everything stays in the local run dir.
    output_uri: Optional[str] = None


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
    from rlexp.config.paths import sweeps_dir

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
    "model.param_dtype": ("float32", "bfloat16"),
    "train.remat": ("none", "full", "dots_saveable"),
    "model.tokenizer": ("char", "hf"),
    "algo.kl_estimator": ("k1", "k2", "k3"),
    "algo.loss_agg": ("token-mean", "sequence-mean-token-mean", "sequence-mean-token-sum",
                      "sequence-mean-token-scale"),
    "algo.scale_rewards": ("group", "batch", "none"),
    "hardware.platform": ("cpu", "tpu", "gpu"),
    "hardware.split": ("colocated", "split"),
    "dataset.template": ("reasoning", "answer"),
    "rollout.name": ("vanilla", "vllm"),
    "tracker.name": ("mlflow", "none"),
    "train.lr_schedule": ("constant", "cosine", "warmup_cosine"),
    "train.early_stop.mode": ("max", "min"),
    "train.prune.mode": ("max", "min"),
    "train.prune.pruner": ("none", "median"),
}

# Valid interval of every numeric field, in interval notation ("[1, inf)": 1 or more).
# Every value must also be finite (inf and nan are refused whatever the interval). None
# (an Optional field left unset) is always allowed. One line per field: a numeric field
# added to a schema above without a line here fails tests/test_config.py.
RANGES: dict[str, str] = {
    "model.num_layers": "[1, inf)",
    "model.embed_dim": "[1, inf)",
    "model.num_heads": "[1, inf)",
    "model.num_kv_heads": "[1, inf)",
    "model.head_dim": "[1, inf)",
    "model.hidden_dim": "[1, inf)",
    "model.vocab_size": "[1, inf)",
    "model.rope_theta": "(0, inf)",
    "model.norm_eps": "(0, 1)",
    "model.max_position": "[1, inf)",
    "model.warm_start_steps": "[0, inf)",
    "model.warm_start_lr": "(0, inf)",
    "model.warm_start_batch_size": "[1, inf)",
    "algo.beta": "[0, inf)",
    "algo.epsilon": "(0, 1)",
    "algo.epsilon_high": "(0, 1)",
    "algo.num_generations": "[2, inf)",
    "algo.num_iterations": "[1, inf)",
    "algo.overlong_buffer": "[0, 1]",  # 0 = off
    "algo.overlong_penalty": "[0, inf)",
    "hardware.chips": "[1, inf)",
    "hardware.devices": "[1, inf)",
    "hardware.hosts": "[1, inf)",
    "hardware.hbm_gib_per_device": "(0, inf)",
    "hardware.peak_bf16_tflops": "(0, inf)",
    "hardware.trainer_mesh.fsdp": "[1, inf)",
    "hardware.trainer_mesh.tp": "[1, inf)",
    "hardware.rollout_mesh.fsdp": "[1, inf)",
    "hardware.rollout_mesh.tp": "[1, inf)",
    "hardware.trainer_fraction": "(0, 1]",
    "hardware.sampler_fraction": "(0, 1]",
    "hardware.cpus_per_task": "[1, inf)",
    "hardware.gpus_per_node": "[0, inf)",
    "hardware.timeout_min": "[1, inf)",
    "hardware.host_memory_gib": "(0, inf)",
    "dataset.num_train": "[1, inf)",
    "dataset.num_eval": "[1, inf)",
    "dataset.seed": "[0, 4294967295]",  # NumPy seeds are unsigned 32-bit
    "dataset.min_terms": "[1, inf)",
    "dataset.max_terms": "[1, inf)",
    "dataset.min_digits": "[1, inf)",
    "dataset.max_digits": "[1, inf)",
    "dataset.eval_fraction": "(0, 1)",
    "rollout.temperature": "(0, inf)",
    "rollout.top_p": "(0, 1]",
    "rollout.top_k": "[1, inf)",
    "rollout.max_prompt_length": "[1, inf)",
    "rollout.max_completion_length": "[1, inf)",
    "rollout.kv_cache_size": "[2, inf)",
    "rollout.tensor_parallel_size": "[1, inf)",
    "rollout.data_parallel_size": "[1, inf)",
    "rollout.hbm_utilization": "(0, 1]",
    "tracker.flush_every_s": "[0, inf)",
    "tracker.system_metrics_every_s": "[0, inf)",  # 0 = off
    "train.early_stop.patience": "[1, inf)",
    "train.early_stop.min_delta": "[0, inf)",
    "train.prune.startup_jobs": "[0, inf)",
    "train.prune.warmup_steps": "[0, inf)",
    "run.profile_steps": "[1, inf)",
    "run.cache_keep": "[1, inf)",
    "reward.functions.weight": "(-inf, inf)",  # negative = a penalty
    "train.steps": "[1, inf)",
    "train.batch_size": "[1, inf)",
    "train.mini_batch_size": "[1, inf)",
    "train.micro_batch_size": "[1, inf)",
    "rollout.micro_batch_size": "[1, inf)",
    "train.learning_rate": "(0, inf)",
    "train.warmup_steps": "[0, inf)",
    "train.grad_clip": "[0, inf)",  # 0 = off
    "train.weight_decay": "[0, inf)",
    "train.seed": "[0, 4294967295]",
    "train.checkpoint_every": "[0, inf)",  # 0 = only at the end
    "train.keep_checkpoints": "[1, inf)",
    "eval.every": "[0, inf)",  # 0 = only before and after
    "eval.num_samples": "[1, inf)",
    "eval.pass_k": "[1, inf)",
    "eval.temperature": "(0, inf)",  # the greedy pass is separate
    "eval.keep_samples": "[0, inf)",
}


def in_range(value: float, interval: str) -> bool:
    """value lies in `interval` ("[0, 1)", "(0, inf)", ...) and is finite."""
    if not math.isfinite(value):
        return False
    lo_text, hi_text = interval[1:-1].split(",")
    lo, hi = float(lo_text), float(hi_text)
    above = value >= lo if interval[0] == "[" else value > lo
    below = value <= hi if interval[-1] == "]" else value < hi
    return above and below


def numeric_keys(schema: type = None, prefix: str = "") -> list[str]:  # type: ignore[assignment]
    """Dotted keys of every int/float field of the schema (Optional ones too; bools are not)."""
    import typing

    schema = schema or Config
    out: list[str] = []
    for name, hint in typing.get_type_hints(schema).items():
        args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        if dataclasses.is_dataclass(args[0]):
            out += numeric_keys(args[0], f"{prefix}{name}.")
        elif args[0] in (int, float):
            out.append(f"{prefix}{name}")
    return out


def _leaves(obj: Any, parts: list[str], prefix: str) -> list[tuple[str, Any]]:
    """(dotted key, value) of `parts` under obj; a list field yields one per item (key.N.x)."""
    if isinstance(obj, (list, tuple)):
        return [kv for i, item in enumerate(obj) for kv in _leaves(item, parts, f"{prefix}{i}.")]
    if not parts:
        return [(prefix.rstrip("."), obj)]
    if not hasattr(obj, parts[0]):  # a field renamed or removed: tests/test_config.py says so
        return []
    return _leaves(getattr(obj, parts[0]), parts[1:], f"{prefix}{parts[0]}.")


def _check_ranges(cfg: Config) -> None:
    for key, interval in RANGES.items():
        for shown, value in _leaves(cfg, key.split("."), ""):
            if value is not None and not isinstance(value, bool):
                _require(in_range(value, interval), shown, value, f"must be in {interval}")


def _get(cfg: Config, dotted: str) -> Any:
    obj: Any = cfg
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _require(ok: bool, key: str, value: Any, rule: str) -> None:
    if not ok:
        raise UserError(f"{key}={value!r} is invalid: {rule}")


def validate(cfg: Config) -> Config:
    """Ranges, choices and the cross-field checks types alone cannot express (UserError)."""
    h = cfg.hardware
    if h.gpu_specs:  # first: a bad gpu_type leaves the figures it selects at 0
        _require(h.gpu_type in h.gpu_specs, "hardware.gpu_type", h.gpu_type,
                 f"valid choices are {', '.join(sorted(h.gpu_specs))}")
    _check_ranges(cfg)
    for key, choices in CHOICES.items():
        value = _get(cfg, key)
        _require(value in choices, key, value, f"valid choices are {', '.join(choices)}")
    a, t, r, e, m = cfg.algo, cfg.train, cfg.rollout, cfg.eval, cfg.model
    if a.name not in algorithms():  # a user's Algorithm by dotted path, or a typo
        _require("." in a.name, "algo.name", a.name, f"valid choices are "
                 f"{', '.join(algorithms())}, or a dotted path to an rlexp.algo.algorithm.Algorithm")
        from rlexp.algo.algorithm import get

        get(a.name)  # UserError naming algo.name when it does not import
    _require(a.num_generations >= 2, "algo.num_generations", a.num_generations,
             "must be >= 2 (group-relative advantages need at least two completions)")
    _require(0 < a.epsilon < 1, "algo.epsilon", a.epsilon, "must be in (0, 1)")
    if a.epsilon_high is not None:
        _require(a.epsilon <= a.epsilon_high < 1, "algo.epsilon_high", a.epsilon_high,
                 f"must be >= algo.epsilon ({a.epsilon}) and < 1")
    _require(a.beta >= 0, "algo.beta", a.beta, "must be >= 0")
    if a.ratio_level is not None:
        _require(a.ratio_level in ("token", "sequence"), "algo.ratio_level", a.ratio_level,
                 "valid choices are token, sequence, null (the algorithm's own)")
    _require(a.num_iterations >= 1, "algo.num_iterations", a.num_iterations, "must be >= 1")
    _require(t.steps >= 1, "train.steps", t.steps, "must be >= 1")
    _require(t.batch_size >= 1, "train.batch_size", t.batch_size, "must be >= 1")
    _require(t.learning_rate > 0, "train.learning_rate", t.learning_rate, "must be > 0")
    _require(t.grad_clip >= 0, "train.grad_clip", t.grad_clip, "must be >= 0 (0 = off)")
    _require(t.checkpoint_every >= 0, "train.checkpoint_every", t.checkpoint_every, "must be >= 0")
    _require(t.keep_checkpoints >= 1, "train.keep_checkpoints", t.keep_checkpoints, "must be >= 1")
    ps = cfg.run.profile_steps
    _require(len(ps) in (0, 2) and (not ps or ps[0] <= ps[1]), "run.profile_steps", list(ps),
             "must be [] or [first, last] with first <= last (global steps, e.g. [2,3])")
    mini = t.mini_batch_size or t.batch_size
    micro = t.micro_batch_size or mini
    _require(t.batch_size % mini == 0, "train.mini_batch_size", t.mini_batch_size,
             f"must divide train.batch_size ({t.batch_size})")
    _require(mini % micro == 0, "train.micro_batch_size", t.micro_batch_size,
             f"must divide the mini-batch size ({mini})")
    rm = r.micro_batch_size
    # Tunix merges (or splits) train micro-batches into sampler calls of this many prompts,
    # within one mini-batch: other sizes leave a ragged last call (another compile).
    _require(rm is None or ((rm % micro == 0 or micro % rm == 0)
                            and (mini % rm == 0 or rm % mini == 0)),
             "rollout.micro_batch_size", rm, f"must divide or be a multiple of both the train "
             f"micro batch ({micro}) and the mini-batch ({mini})")
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
    _require(d.extractor in ("none", "gsm8k", "boxed", "regex") or "." in d.extractor,
             "dataset.extractor", d.extractor,
             "valid choices are none, gsm8k, boxed, regex, or a dotted path to fn(text)")
    _require(d.extractor != "regex" or bool(d.answer_regex), "dataset.answer_regex",
             d.answer_regex, "must be set when dataset.extractor=regex")
    generated = d._target_ in ("rlexp.data.loaders.arithmetic", "rlexp.data.loaders.gsm_symbolic")
    _require(not (generated and (d.path or d.hub)), "dataset.path" if d.path else "dataset.hub",
             d.path or d.hub, f"{d._target_} generates its problems and would ignore it; pick a "
             f"file dataset (dataset=gsm8k, or dataset._target_=rlexp.data.loaders.generic)")
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

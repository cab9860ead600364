"""Typed schema of every config group, registered in Hydra's ConfigStore: data only.

These dataclasses say which keys exist, their types, defaults and meaning; conf/ holds the
values, rlexp.config.validate what is valid."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from rlexp.config.paths import sweeps_dir


@dataclass
class LoraConfig:
    # Rank of the low-rank adapters (0 = off: every weight trains), through qwix's LoraProvider
    # as Tunix's CLI applies it (tunix/cli/utils/model.py): the frozen base weights are the
    # reference model; the optimizer and checkpoints hold only the adapters.
    rank: int = 0
    # Scale of the adapters' update: W + (alpha / rank) * A @ B (qwix, as PEFT's lora_alpha).
    alpha: float = 16.0
    # Regex (re.fullmatch) over module paths like "layers/0/attn/q_proj" picking the projections
    # that get adapters; Tunix's llama3/qwen2/qwen3 names: q_proj k_proj v_proj o_proj
    # (attention), gate_proj up_proj down_proj (MLP); Gemma's attention: q_einsum kv_einsum
    # (qkv_einsum) attn_vec_einsum (rlexp.families: lora_projections).
    targets: str = ".*q_proj|.*k_proj|.*v_proj|.*o_proj|.*gate_proj|.*up_proj|.*down_proj"
    # Export (run.export, python -m rlexp.export) the adapters alone, in PEFT's layout
    # (adapter_model.safetensors + adapter_config.json), instead of the merged model.
    adapters_only: bool = False


@dataclass
class ModelConfig:
    # Short name of the model profile (the option chosen in conf/model/).
    name: str = "tiny"
    # Architecture family (a module of rlexp/families/: Tunix's model code, the Hugging Face
    # mappings, the memory formula's inputs): llama3 | qwen3 | qwen2 | gemma3 | gemma2 | cohere.
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
    # RoPE base frequency (Gemma 3: of the global layers; its local layers use 10,000).
    rope_theta: float = 1000000.0
    # Linear RoPE position scaling of the global layers (Gemma 3 4B and up: 8.0); 1 = none.
    rope_scale: float = 1.0
    # Keys a sliding-window layer attends to (Gemma 3's local layers); null = no such layers.
    sliding_window: Optional[int] = None
    # Whether the output projection reuses the embedding table.
    tie_embeddings: bool = True
    # RMSNorm epsilon (Cohere: its LayerNorm's, config.json layer_norm_eps).
    norm_eps: float = 1e-6
    # Output-logit factor, cohere only (config.json logit_scale; aya-expanse-8b: 0.125); 1 = none.
    logit_scale: float = 1.0
    # Per-head q/k LayerNorms (Cohere's config.json use_qk_norm, Command R+). Read by the
    # cohere family only (Qwen3 and Gemma 3 always have theirs).
    qk_norm: bool = False
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
    # Low-rank adapters (model.lora.rank > 0): only they train.
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class AlgoConfig:
    # Algorithm of rlexp.algo.variants: grpo | gspo | dapo | dr_grpo, or a dotted path to a
    # user's rlexp.algo.algorithm.Algorithm (its ratio level and advantage estimator).
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
    # Drop completions cut at the budget (no EOS) from the loss (TRL mask_truncated_completions).
    mask_truncated: bool = False
    # Drop groups with all-equal rewards from the loss (DAPO dynamic sampling, no re-sampling).
    dynamic_sampling: bool = False
    # DAPO overlong shaping: share of the completion budget (its last tokens) over which a
    # penalty grows linearly to -overlong_penalty (the paper: 4096 of 20480 = 0.2); 0 = off.
    overlong_buffer: float = 0.0
    # DAPO overlong shaping: weight of the penalty (logged as train/reward/overlong).
    overlong_penalty: float = 1.0
    # Policy-loss family (rlexp.algo.losses): ppo_clip (GRPO/GSPO/DAPO/Dr.GRPO) | cispo |
    # sapo | gmpo | luspo | vespo | clip_cov | kl_cov (TRL loss_type / verl loss_mode).
    loss: str = "ppo_clip"
    # Advantage estimator (rlexp.algo.advantages): grpo (group mean, scale_rewards) | rloo |
    # reinforce_pp | reinforce_pp_baseline (verl adv_estimator).
    advantage: str = "grpo"
    # SAPO gate temperature for tokens with A > 0 / A <= 0 (TRL sapo_temperature_pos/_neg).
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05
    # VESPO gamma weighting exponents and rates for A >= 0 / A < 0 (TRL vespo_*).
    vespo_k_pos: float = 2.0
    vespo_lambda_pos: float = 3.0
    vespo_k_neg: float = 3.0
    vespo_lambda_neg: float = 2.0
    # Clip-Cov: share of tokens with a cut gradient; covariance window (verl clip_cov_ratio/lb/ub).
    clip_cov_ratio: float = 2e-4
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    # KL-Cov: share of tokens given the |log r| penalty, its weight (verl kl_cov_ratio/ppo_kl_coef).
    kl_cov_ratio: float = 2e-4
    ppo_kl_coef: float = 1.0
    # Entropy bonus: loss - entropy_coef x mean token entropy (TRL entropy_coef); 0 = off.
    entropy_coef: float = 0.0
    # Policy term on the top share of tokens by entropy only (TRL top_entropy_quantile;
    # arXiv:2506.01939 keeps 0.2); 1 = every token.
    top_entropy_quantile: float = 1.0
    # Trainer/sampler mismatch correction (rlexp.algo.rollout_correction; TRL
    # vllm_importance_sampling_mode): none | token_truncate | token_mask | sequence_truncate |
    # sequence_mask. The gap is logged every step (rollout/logprob_diff, _max).
    rollout_correction: str = "none"
    # Bounds of the importance weight pi_old / pi_sampler: clipped to them (*_truncate) or 0
    # outside them (*_mask); None = no bound (TRL vllm_importance_sampling_clip_min/_max).
    rollout_correction_clip_min: Optional[float] = None
    rollout_correction_clip_max: Optional[float] = 3.0


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
    # Hosts; under runtime=multi_controller one process each, holding devices / hosts devices.
    hosts: int = 1
    # How the run reaches its devices (rlexp.planning.hardware): single (one process sees every
    # device) | multi_controller (one process per host) | pathways (one process sees every
    # host's devices through the Pathways proxy).
    runtime: str = "single"
    # multi_controller: seconds to wait for every process to join, then one line and exit.
    join_timeout_s: int = 60
    # multi_controller: seconds without a heartbeat after which a process counts as lost
    # (jax.distributed's heartbeat_timeout_seconds; the others then stop, naming it).
    heartbeat_timeout_s: int = 20
    # High-bandwidth memory per JAX device, GiB.
    hbm_gib_per_device: float = 24.0
    # Peak dense bf16 TFLOP/s per device (for MFU); None = no datasheet figure (a CPU): no perf/mfu.
    peak_bf16_tflops: Optional[float] = None
    # Regex that jax.Device.device_kind must fully match ("TPU v6 lite"); None = any kind.
    device_kind: Optional[str] = None
    # GPU model when platform=gpu (h100 | h200): picks HBM, peak and kind from gpu_specs.
    gpu_type: Optional[str] = None
    # Datasheet figures per GPU model (hbm_gib, peak_bf16_tflops, device_kind, ...), which
    # conf/hardware/gpu.yaml interpolates by gpu_type; empty off GPU.
    gpu_specs: dict[str, Any] = field(default_factory=dict)
    # Mesh of the trainer (policy + reference).
    trainer_mesh: MeshConfig = field(default_factory=MeshConfig)
    # Mesh of the rollout (sampler): every rollout device, all rollout.replicas together.
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
    # Dotted path (Hydra's _target_) of a builder fn(DatasetConfig) -> RawSplits or rows (dicts)
    # that the fields below turn into problems: rlexp.data.loaders.{arithmetic, gsm_symbolic,
    # generic} or yours.
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
    # Share of the rows held out when there is no eval_split; None = dataset.num_eval rows (at
    # most half). At most dataset.num_eval of them are evaluated.
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
    # Largest share of prompts longer than rollout.max_prompt_length (the sampler keeps their
    # last tokens, cutting the question): more is an error naming a length that fits 99%, fewer
    # one warning line; 0 = none may be cut.
    max_truncated_fraction: float = 0.05
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
    # Prompts per sampler call (and per reference/old log-prob pass); None = the train micro
    # batch on the CPU, else planned from memory (rlexp.planning.memory.rollout_micro_prompts).
    # Smaller values cap the KV cache and prefill logits in the memory plan.
    micro_batch_size: Optional[int] = None
    # vllm: tensor-parallel size; -1 = the rollout devices over data_parallel_size (both -1:
    # every rollout device, DP 1, as Tunix resolves them).
    tensor_parallel_size: int = 1
    # vllm: data-parallel size; -1 = the rollout devices over tensor_parallel_size.
    data_parallel_size: int = 1
    # rollout=vanilla: data-parallel samplers (MaxText's inference_replicas), each a whole copy
    # of the weights over its share of the rollout mesh's fsdp axis (which this must divide),
    # decoding its share of a call's rows; > 1 needs a TPU or GPU. rollout=vllm: 1 (vLLM's
    # replicas are rollout.data_parallel_size).
    replicas: int = 1
    # Prompts per rollout device in one sampler call (MaxText's per_device_batch_size of the
    # inference config), at most one mini-batch a call; None = rollout.micro_batch_size decides.
    per_device_batch_size: Optional[int] = None
    # vllm: fraction of HBM vLLM may take.
    hbm_utilization: float = 0.4
    # Copy the trainer's weights to the sampler every N global steps (MaxText's
    # inference_rollouts; 1 = every step, at most train.steps) when the sampler holds its own
    # copy (split hardware, another mesh or vLLM): rollouts then come from weights up to N-1
    # steps old, uncorrected (the old log-probs are the trainer's).
    sync_every: int = 1


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
    # Longest interval, seconds, between samples of MLflow's system-metrics monitor (CPU, RAM,
    # GPU, process RSS, JAX memory): 1 s at first, slowing to ~60 points a run; 0 = off.
    system_metrics_every_s: float = 10.0
    # Steps between training-rollout tables (prompt, completion, rewards, advantage, length,
    # truncated: rollouts/step_*.json); None = at each evaluation (eval.every); 0 = off.
    log_completions_every: Optional[int] = None


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
    # {format_exact,format_approx,answer_exact,answer_close,math_verify}_reward, overlong_penalty.
    functions: list[RewardFunctionConfig] = field(default_factory=_builtin_rewards)
    # The conf/reward set chosen (reward=maxtext, easydel_numina); None = the list above.
    name: Optional[str] = None


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
    # Prompts per step, each with algo.num_generations completions (Tunix's GSM8K GRPO: 8).
    batch_size: int = 8
    # Prompts per policy update (mini-batch); None = batch_size.
    mini_batch_size: Optional[int] = None
    # Prompts per gradient accumulation slice; None = mini_batch_size.
    micro_batch_size: Optional[int] = None
    # Peak learning rate. Real-model default 3e-6 (MaxText rl.yml, Tunix grpo_demo); the
    # tiny model's recipe (conf/recipe/tiny.yaml) uses 1e-3.
    learning_rate: float = 3e-6
    # constant | cosine | warmup_cosine | linear (warm-up, then a straight line from
    # learning_rate to end_learning_rate; EasyDeL's LINEAR scheduler).
    lr_schedule: str = "warmup_cosine"
    # Learning rate the decaying schedules reach after the last optimizer update; 0 = to zero.
    end_learning_rate: float = 0.0
    # Passes over the training prompts; when set, train.steps = ceil(epochs x dataset.num_train
    # / train.batch_size) (the last step may take prompts of the next pass) and num_train must
    # be the training set's size. None = train.steps as given.
    epochs: Optional[int] = None
    # Linear warm-up steps (warmup_cosine); the seeds warm up over 10% of the steps.
    warmup_steps: int = 10
    # Global gradient-norm clip; 0 = off (MaxText/Tunix GRPO recipes: 0.1, "important to
    # keep KL divergence in check").
    grad_clip: float = 0.1
    # AdamW weight decay (MaxText/Tunix GRPO recipes: 0.1).
    weight_decay: float = 0.1
    # Activation rematerialization of the training forward: none | full (recompute each layer
    # in the backward pass) | dots_saveable (keep matmul outputs). The sampler never remats
    # (Tunix's decoder remat crashed there). Default full, as MaxText's RL recipes remat.
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
    # Cache shared by runs (warm-start weights, generated problems, JAX's compiled programs,
    # converted models); $RLEXP_CACHE_DIR shares one across project directories.
    cache_dir: str = "${oc.env:RLEXP_CACHE_DIR,outputs/cache}"
    # JAX's persistent compilation cache under <cache_dir>/jax (JAX_COMPILATION_CACHE_DIR wins).
    compilation_cache: bool = True
    # Warm-start cache entries kept under cache_dir (least recently used deleted first).
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
    # Outputs that outlive the machine, e.g. gs://bucket/rlexp: checkpoints (and resumes) under
    # <output_uri>/<run name>/checkpoints, summary.json and export/ copied at the end; null = off.
    output_uri: Optional[str] = None
    # The scheduler priority a launcher gives this run (xpk --priority): very-low | low |
    # medium | high | very-high; null = the launcher's own (hydra.launcher.priority wins).
    priority: Optional[str] = None


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
    cs = ConfigStore.instance()
    # The root schema types every group's node, so group YAML files need no schema of their own.
    cs.store(name="base_config", node=Config)
    # sweeps/*.yaml become the `sweep` group (+sweep=NAME), from the wheel or the checkout.
    found = sweeps_dir()
    for path in sorted(found.glob("*.yaml")) if found else []:
        cs.store(group="sweep", name=path.stem, node=OmegaConf.load(path), package="_global_")

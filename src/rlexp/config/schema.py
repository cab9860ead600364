"""Typed schema of every config group, registered in Hydra's ConfigStore: each field's type,
default, valid values (a `knob`, checked by rlexp.config.validate) and meaning (the comment
above it); conf/ holds the values. The algo section is rlexp.algo.settings' AlgoConfig."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from rlexp.algo.settings import AlgoConfig
from rlexp.base.knobs import knob
from rlexp.config.paths import sweeps_dir
from rlexp.config.rollouts.names import rollout_names
from rlexp.families import families

# Compute and weight dtypes (model.dtype, model.param_dtype).
DTYPES = ("float32", "bfloat16")
# Whether a higher or a lower metric is better.
MODES = ("max", "min")
# train.lr_schedule (rlexp.engine.lr_schedule computes them).
LR_SCHEDULES = ("constant", "cosine", "warmup_cosine", "linear")
# train.steps' (and derived steps') bound: 11 days at 1 s a step; the LR table has a float a step.
MAX_STEPS = 1_000_000
# Prompts per step or per call (RL recipes: 8-1024): far past any accelerator's memory.
MAX_BATCH = 65536
# Token lengths: the longest context of any shipped model (Llama 3.1, 128k).
MAX_TOKENS = 131072
# NumPy seeds are unsigned 32-bit.
SEED_RANGE = "[0, 4294967295]"


@dataclass
class LoraConfig:
    # Adapter rank (0 = off), qwix's LoraProvider as tunix/cli/utils/model.py; base = reference.
    rank: int = knob(0, range="[0, 4096]")
    # Scale of the adapters' update: W + (alpha / rank) * A @ B (qwix, as PEFT's lora_alpha).
    alpha: float = knob(16.0, range="(0, inf)")
    # re.fullmatch over module paths ("layers/0/attn/q_proj") picking the adapted projections
    # (each family's lora_projections; Gemma: q_einsum kv_einsum qkv_einsum attn_vec_einsum).
    targets: str = ".*q_proj|.*k_proj|.*v_proj|.*o_proj|.*gate_proj|.*up_proj|.*down_proj"
    # Export the adapters alone in PEFT's layout (adapter_model.safetensors), not the merged model.
    adapters_only: bool = False


@dataclass
class ModelConfig:
    # Short name of the model profile (the option chosen in conf/model/).
    name: str = "tiny"
    # Architecture family (a module of rlexp/families/).
    family: str = knob("qwen3", choices=families)
    # Local directory with HF safetensors + config.json; None = random init (tiny only).
    path: Optional[str] = None
    # Transformer blocks.
    num_layers: int = knob(2, range="[1, inf)")
    # Width of the residual stream (HF hidden_size).
    embed_dim: int = knob(64, range="[1, inf)")
    # Query heads.
    num_heads: int = knob(4, range="[1, inf)")
    # Key/value heads (grouped-query attention).
    num_kv_heads: int = knob(2, range="[1, inf)")
    # Width of one attention head.
    head_dim: int = knob(16, range="[1, inf)")
    # Width of the MLP's hidden layer (HF intermediate_size).
    hidden_dim: int = knob(128, range="[1, inf)")
    # Vocabulary size of the embedding table.
    vocab_size: int = knob(64, range="[1, inf)")
    # RoPE base frequency (Gemma 3: of the global layers; its local layers use 10,000).
    rope_theta: float = knob(1000000.0, range="(0, inf)")
    # Linear RoPE position scaling of the global layers (Gemma 3 4B and up: 8.0); 1 = none.
    rope_scale: float = knob(1.0, range="[1, inf)")
    # Keys a sliding-window layer attends to (Gemma 3's local layers); null = no such layers.
    sliding_window: Optional[int] = knob(None, range="[1, inf)")
    # Whether the output projection reuses the embedding table.
    tie_embeddings: bool = True
    # RMSNorm epsilon (Cohere: its LayerNorm's, config.json layer_norm_eps).
    norm_eps: float = knob(1e-6, range="(0, 1)")
    # Output-logit factor, cohere only (config.json logit_scale; aya-expanse-8b: 0.125); 1 = none.
    logit_scale: float = knob(1.0, range="(0, inf)")
    # Per-head q/k LayerNorms, cohere only (config.json use_qk_norm, Command R+).
    qk_norm: bool = False
    # Longest context the model was trained for.
    max_position: int = knob(512, range="[1, inf)")
    # Compute dtype (activations, matmuls, the sampler's KV cache): float32 | bfloat16.
    dtype: str = knob("float32", choices=DTYPES)
    # Weights' and AdamW moments' dtype (MaxText's weight_dtype); float32 keeps small updates.
    param_dtype: str = knob("float32", choices=DTYPES)
    # Tokenizer: char (built in, offline) | hf (tokenizer.json in model.path).
    tokenizer: str = knob("char", choices=("char", "hf"))
    # Wrap prompts in the tokenizer's chat template (instruct checkpoints).
    chat_template: bool = False
    # Supervised warm-start steps on reference answers before RL (0 = none); cached.
    warm_start_steps: int = knob(0, range=f"[0, {MAX_STEPS}]")
    # Learning rate of the warm-start stage.
    warm_start_lr: float = knob(3e-3, range="(0, inf)")
    # Sequences per warm-start step.
    warm_start_batch_size: int = knob(32, range=f"[1, {MAX_BATCH}]")
    # Low-rank adapters (model.lora.rank > 0): only they train.
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class MeshConfig:
    # Fully-sharded data-parallel axis size.
    fsdp: int = knob(1, range="[1, inf)")
    # Tensor-parallel axis size.
    tp: int = knob(1, range="[1, inf)")


@dataclass
class HardwareConfig:
    # Profile name (the option chosen in conf/hardware/).
    name: str = "cpu"
    # JAX platform the profile expects: cpu | tpu | gpu.
    platform: str = knob("cpu", choices=("cpu", "tpu", "gpu"))
    # Accelerator type as the scheduler names it (TPU type for xpk, GPU model for SLURM).
    accelerator_type: str = "cpu"
    # Physical chips in the slice (a TPU v5p chip has two cores but is one JAX device).
    chips: int = knob(1, range="[1, inf)")
    # JAX devices visible to the job over all hosts.
    devices: int = knob(1, range="[1, inf)")
    # Hosts; under runtime=multi_controller one process each, holding devices / hosts devices.
    hosts: int = knob(1, range="[1, inf)")
    # single (one process, all devices) | multi_controller (one per host) | pathways (proxy).
    runtime: str = knob("single", choices=("single", "multi_controller", "pathways"))
    # multi_controller: seconds to wait for every process to join, then one line and exit.
    join_timeout_s: int = knob(60, range="[1, 3600]")
    # multi_controller: seconds without a heartbeat before a process counts as lost.
    heartbeat_timeout_s: int = knob(20, range="[2, 3600]")
    # High-bandwidth memory per JAX device, GiB.
    hbm_gib_per_device: float = knob(24.0, range="(0, inf)")
    # Peak dense bf16 TFLOP/s per device (for MFU); None = no datasheet figure (a CPU): no perf/mfu.
    peak_bf16_tflops: Optional[float] = knob(None, range="(0, inf)")
    # Regex that jax.Device.device_kind must fully match ("TPU v6 lite"); None = any kind.
    device_kind: Optional[str] = None
    # GPU model when platform=gpu (h100 | h200): picks HBM, peak and kind from gpu_specs.
    gpu_type: Optional[str] = knob(None, keys_of="gpu_specs")
    # Datasheet figures per GPU model, which conf/hardware/gpu.yaml picks by gpu_type.
    gpu_specs: dict[str, Any] = field(default_factory=dict)
    # Mesh of the trainer (policy + reference).
    trainer_mesh: MeshConfig = field(default_factory=MeshConfig)
    # Mesh of the rollout (sampler): every rollout device, all rollout.replicas together.
    rollout_mesh: MeshConfig = field(default_factory=MeshConfig)
    # colocated: trainer and sampler share all devices | split: disjoint device fractions.
    split: str = knob("colocated", choices=("colocated", "split"))
    # Fraction of devices for the trainer when split (MaxText trainer_devices_fraction).
    trainer_fraction: float = knob(1.0, range="(0, 1]")
    # Fraction of devices for the sampler when split (MaxText sampler_devices_fraction).
    sampler_fraction: float = knob(1.0, range="(0, 1]")
    # Run the profile's meshes on virtual CPU devices (sharding tested without the chips).
    emulate: bool = False
    # SLURM: CPUs per task for a job on this hardware.
    cpus_per_task: int = knob(2, range="[1, inf)")
    # SLURM: GPUs per node (0 for CPU/TPU).
    gpus_per_node: int = knob(0, range="[0, inf)")
    # SLURM: wall-clock limit per job, minutes.
    timeout_min: int = knob(60, range="[1, inf)")
    # SLURM partition; None = cluster default.
    partition: Optional[str] = None
    # Memory the host may use for this job, GiB (CPU memory plan).
    host_memory_gib: float = knob(24.0, range="(0, inf)")


@dataclass
class DatasetConfig:
    # Name of the dataset option (conf/dataset/<name>.yaml, packaged or in a --config-dir).
    name: str = "arithmetic"
    # Dotted path of a builder fn(DatasetConfig) -> RawSplits or rows (rlexp.data.loaders).
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
    # Rows held out without eval_split; None = num_eval rows (at most half); num_eval evaluated.
    eval_fraction: Optional[float] = knob(None, range="(0, 1)")
    # generic: row field holding the question.
    question_field: str = "question"
    # generic: row field holding the reference answer (or a solution to extract it from).
    answer_field: str = "answer"
    # generic: worked-reasoning field (warm start); None = none, or before '####' with gsm8k.
    reasoning_field: Optional[str] = None
    # none (as is) | gsm8k ('#### N') | boxed (last \boxed{}) | regex | dotted fn(text) -> str.
    extractor: str = knob("none", choices=("none", "gsm8k", "boxed", "regex"),
                          dotted="a dotted path to fn(text)")
    # extractor=regex: pattern whose first group (or whole match) is the answer.
    answer_regex: Optional[str] = None
    # Training prompts drawn (procedural datasets) or kept (files).
    num_train: int = knob(2000, range="[1, inf)")
    # Held-out prompts, disjoint from training.
    num_eval: int = knob(64, range="[1, inf)")
    # Seed of generation and shuffling; fixed across swept jobs for paired comparisons.
    seed: int = knob(1234, range=SEED_RANGE)
    # reasoning-gym difficulty: number of terms in an arithmetic expression.
    min_terms: int = knob(2, range="[1, inf)")
    # reasoning-gym difficulty: most terms.
    max_terms: int = knob(2, range="[1, inf)")
    # reasoning-gym difficulty: fewest digits per number.
    min_digits: int = knob(1, range="[1, inf)")
    # reasoning-gym difficulty: most digits per number.
    max_digits: int = knob(1, range="[1, inf)")
    # Prompt template: reasoning (<reasoning>/<answer> tags) | answer (<answer> tag only).
    template: str = knob("answer", choices=("reasoning", "answer"))
    # Tag around the working out with template=reasoning (think gives <think>...</think>).
    reasoning_tag: str = "reasoning"
    # Instruction under the question (chat: system message); None = the template's; "" = none.
    system_prompt: Optional[str] = None
    # User message with a {question} placeholder; None = question + instruction.
    prompt: Optional[str] = None
    # File holding `prompt` (read at start); wins over dataset.prompt.
    prompt_file: Optional[str] = None
    # Share of prompts allowed past rollout.max_prompt_length (start cut); more = error; 0 = none.
    max_truncated_fraction: float = knob(0.05, range="[0, 1]")
    # reasoning-gym arithmetic: operators drawn from, a subset of "+-*/".
    operators: str = "+-"
    # reasoning-gym arithmetic: allow unary minus on terms ("3 - -2").
    allow_negation: bool = False
    # reasoning-gym arithmetic: allow parenthesised sub-expressions.
    allow_parentheses: bool = False


@dataclass
class RolloutConfig:
    # Rollout engine: vanilla (Tunix's sampler) | vllm (needs vllm/tpu-inference installed).
    name: str = knob("vanilla", choices=rollout_names,
                     dotted="a dotted path to an rlexp.config.rollouts.RolloutSpec")
    # Sampling temperature for training rollouts.
    temperature: float = knob(1.0, range="(0, inf)")
    # Nucleus sampling mass; None = off.
    top_p: Optional[float] = knob(None, range="(0, 1]")
    # Top-k sampling; None = off.
    top_k: Optional[int] = knob(None, range="[1, inf)")
    # Longest prompt in tokens, left-truncated (MaxText rl.yml max_prefill_predict_length).
    max_prompt_length: int = knob(256, range=f"[1, {MAX_TOKENS}]")
    # Tokens per completion: room for <reasoning> and <answer> (MaxText rl.yml, grpo_demo).
    max_completion_length: int = knob(768, range=f"[1, {MAX_TOKENS}]")
    # KV-cache size in tokens (vLLM's max_model_len); a composed config derives it from the two
    # lengths above unless set (KV_CACHE_DEFAULT); 1024 is their sum at the schema's lengths.
    kv_cache_size: int = knob(1024, range=f"[2, {2 * MAX_TOKENS}]")
    # Prompts per sampler call (and log-prob pass); None = planned (memory.rollout_micro_prompts).
    micro_batch_size: Optional[int] = knob(None, range=f"[1, {MAX_BATCH}]")
    # vllm: tensor-parallel size; -1 = devices / data_parallel_size (both -1: all, DP 1).
    tensor_parallel_size: int = knob(1, range="[-1, inf)")
    # vllm: data-parallel size; -1 = the rollout devices over tensor_parallel_size.
    data_parallel_size: int = knob(1, range="[-1, inf)")
    # vanilla: data-parallel samplers (MaxText's inference_replicas); > 1 needs a TPU or GPU.
    replicas: int = knob(1, range="[1, inf)")
    # Prompts per rollout device a call (MaxText's per_device_batch_size); None = micro_batch.
    per_device_batch_size: Optional[int] = knob(None, range=f"[1, {MAX_BATCH}]")
    # vllm: fraction of HBM vLLM may take.
    hbm_utilization: float = knob(0.4, range="(0, 1]")
    # Sync a separate sampler's weights every N steps (MaxText's inference_rollouts): stale.
    sync_every: int = knob(1, range=f"[1, {MAX_STEPS}]")
    # Steps the sampler runs ahead of the trainer (MaxText's rl.off_policy_steps): step n's batch
    # is sampled with weights at most k updates old, beside step n-1's update; 0 = on-policy.
    off_policy_steps: int = knob(0, range="[0, 4]")
    # Steps between the sampler's per-token log-probs for rollout/logprob_diff, step 1 always
    # (0: step 1 only); every step when algo.rollout_correction or off_policy_steps uses them.
    logprob_gap_every: int = knob(10, range=f"[0, {MAX_STEPS}]")


@dataclass
class TrackerConfig:
    # mlflow | none.
    name: str = knob("mlflow", choices=("mlflow", "none"))
    # Tracking URI; None = $MLFLOW_TRACKING_URI or sqlite:///outputs/mlflow.db.
    uri: Optional[str] = None
    # MLflow experiment name.
    experiment: str = "rlexp"
    # Seconds between buffered writes of metrics.
    flush_every_s: float = knob(5.0, range="[0, inf)")
    # MLflow run name; None = a sweep job's swept values, else the algo/model/... choices.
    run_name: Optional[str] = None
    # Extra MLflow run tags, e.g. +tracker.tags.team=rl (values are redacted like params).
    tags: dict[str, str] = field(default_factory=dict)
    # Longest interval, seconds, between MLflow system-metrics samples; 0 = off.
    system_metrics_every_s: float = knob(10.0, range="[0, inf)")
    # Steps between rollout tables (rollouts/step_*.json); None = at each evaluation; 0 = off.
    log_completions_every: Optional[int] = knob(None, range="[0, inf)")


@dataclass
class RewardFunctionConfig:
    # Dotted path of fn(prompts, completions, answers, **kwargs) -> a float per completion.
    _target_: str = "rlexp.rewards.answer_exact_reward"
    # Weight in the total reward (negative = a penalty; 0 = off).
    weight: float = knob(1.0, range="(-inf, inf)")
    # Logged as train/reward/<name>; None = the function's __name__.
    name: Optional[str] = None
    # Keyword arguments passed on every call (besides dataset.template and reasoning_tag).
    kwargs: dict[str, Any] = field(default_factory=dict)


def _builtin_rewards() -> list[RewardFunctionConfig]:
    # The default run's rewards (MaxText's GSM8K recipe: format + answer + closeness).
    return [RewardFunctionConfig("rlexp.rewards.format_exact_reward", 0.5, "format_exact"),
            RewardFunctionConfig("rlexp.rewards.format_approx_reward", 0.25, "format_approx"),
            RewardFunctionConfig("rlexp.rewards.answer_exact_reward", 1.0, "answer_exact"),
            RewardFunctionConfig("rlexp.rewards.answer_close_reward", 0.5, "answer_close")]


@dataclass
class RewardConfig:
    # Reward plug-ins summed by weight (a list replaces it; reward.functions.2.weight=2).
    functions: list[RewardFunctionConfig] = field(default_factory=_builtin_rewards)
    # The conf/reward set chosen (reward=maxtext, easydel_numina); None = the list above.
    name: Optional[str] = None


@dataclass
class EarlyStopConfig:
    # Metric watched (a key the loop logs, e.g. eval/accuracy or train/reward_mean); None = off.
    metric: Optional[str] = None
    # Checks without a min_delta improvement before stopping (eval/* per eval, train/* per step).
    patience: int = knob(3, range="[1, inf)")
    # max: higher is better | min: lower is better.
    mode: str = knob("max", choices=MODES)
    # Smallest change that counts as an improvement.
    min_delta: float = knob(0.0, range="[0, inf)")


@dataclass
class PruneConfig:
    # Prune sweep jobs whose eval curve trails the others': none | median (Optuna's MedianPruner).
    pruner: str = knob("none", choices=("none", "median"))
    # The curve compared, reported at each evaluation.
    metric: str = "eval/accuracy"
    # max: higher is better | min: lower is better.
    mode: str = knob("max", choices=MODES)
    # Jobs that run to the end before any is pruned (MedianPruner n_startup_trials).
    startup_jobs: int = knob(2, range="[0, inf)")
    # Steps before a job may be pruned (MedianPruner n_warmup_steps).
    warmup_steps: int = knob(0, range="[0, inf)")


@dataclass
class TrainConfig:
    # RL steps (one rollout batch each).
    steps: int = knob(100, range=f"[1, {MAX_STEPS}]")
    # Prompts per step, each with algo.num_generations completions (Tunix's GSM8K GRPO: 8).
    batch_size: int = knob(8, range=f"[1, {MAX_BATCH}]")
    # Prompts per policy update (mini-batch); None = batch_size.
    mini_batch_size: Optional[int] = knob(None, range=f"[1, {MAX_BATCH}]")
    # Prompts per gradient accumulation slice; None = mini_batch_size.
    micro_batch_size: Optional[int] = knob(None, range=f"[1, {MAX_BATCH}]")
    # Peak learning rate (MaxText rl.yml, Tunix grpo_demo: 3e-6; conf/recipe/tiny.yaml: 1e-3).
    learning_rate: float = knob(3e-6, range="(0, inf)")
    # constant | cosine | warmup_cosine | linear (warm-up, then a line to end_learning_rate).
    lr_schedule: str = knob("warmup_cosine", choices=LR_SCHEDULES)
    # Learning rate the decaying schedules reach after the last optimizer update; 0 = to zero.
    end_learning_rate: float = knob(0.0, range="[0, inf)")
    # Passes over the prompts: steps = ceil(epochs x num_train / batch_size) (EasyDeL: 3).
    epochs: Optional[int] = knob(None, range="[1, 1000]")
    # Linear warm-up steps (warmup_cosine); the seeds warm up over 10% of the steps.
    warmup_steps: int = knob(10, range="[0, inf)")
    # Global gradient-norm clip; 0 = off (MaxText/Tunix GRPO: 0.1, "keep KL divergence in check").
    grad_clip: float = knob(0.1, range="[0, inf)")
    # AdamW weight decay (MaxText/Tunix GRPO recipes: 0.1).
    weight_decay: float = knob(0.1, range="[0, inf)")
    # Training-forward remat (MaxText's): none | full (recompute layers) | dots_saveable (matmuls).
    remat: str = knob("full", choices=("none", "full", "dots_saveable"))
    # Seed of init, sampling and data order; shared by jobs of a sweep unless swept.
    seed: int = knob(0, range=SEED_RANGE)
    # Save a checkpoint every N steps; 0 = only at the end.
    checkpoint_every: int = knob(0, range="[0, inf)")
    # Checkpoints kept on disk.
    keep_checkpoints: int = knob(2, range="[1, inf)")
    # Stop a run whose metric stalls (train.early_stop.metric=eval/accuracy to enable).
    early_stop: EarlyStopConfig = field(default_factory=EarlyStopConfig)
    # Stop sweep jobs that trail the others (train.prune.pruner=median).
    prune: PruneConfig = field(default_factory=PruneConfig)


@dataclass
class EvalConfig:
    # Evaluate every N steps (and always before and after); 0 = only before and after.
    every: int = knob(0, range="[0, inf)")
    # Held-out prompts per evaluation (<= dataset.num_eval).
    num_samples: int = knob(64, range="[1, inf)")
    # k of pass@k (k sampled completions per prompt).
    pass_k: int = knob(4, range="[1, 1024]")
    # Temperature of the sampled pass (greedy pass is temperature 0).
    temperature: float = knob(1.0, range="(0, inf)")
    # Sample completions kept per evaluation (logged as a table).
    keep_samples: int = knob(8, range="[0, inf)")


@dataclass
class RunConfig:
    # Print the plan (model, mesh, memory, steps, outputs) and exit without compiling.
    dry_run: bool = False
    # Resume from the latest checkpoint of this run dir when one exists.
    resume: bool = True
    # Show a progress bar.
    progress: bool = True
    # Cache shared by runs (warm starts, problems, compiled programs); $RLEXP_CACHE_DIR wins.
    cache_dir: str = "${oc.env:RLEXP_CACHE_DIR,outputs/cache}"
    # JAX's persistent compilation cache under <cache_dir>/jax (JAX_COMPILATION_CACHE_DIR wins).
    compilation_cache: bool = True
    # Warm-start cache entries kept under cache_dir (least recently used deleted first).
    cache_keep: int = knob(8, range="[1, inf)")
    # [first, last] global steps traced by the JAX profiler into <run dir>/profile; [] = off.
    profile_steps: list[int] = knob(factory=list, range="[1, inf)")
    # Fork from another run's newest checkpoint (run dir, checkpoint dir or MLflow run id).
    init_from: Optional[str] = None
    # At the end of a finished run, write the policy as a Hugging Face dir (artifact `model`).
    export: bool = True
    # Outputs outliving the machine (gs://bucket/rlexp): checkpoints, summary.json, export/.
    output_uri: Optional[str] = None
    # Scheduler priority (xpk --priority); null = the launcher's (hydra.launcher.priority wins).
    priority: Optional[str] = knob(None, choices=("very-low", "low", "medium", "high",
                                                  "very-high"),
                                   null="null (the launcher's own)")


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


# rollout.kv_cache_size where a config is composed: prompt + completion, what the sampler fills
# (Tunix's Sampler refuses less), resolved when the config becomes a Config, so a recipe's or an
# override's lengths move it and an explicit value replaces it.
KV_CACHE_DEFAULT = "${rlexp_sum:${.max_prompt_length},${.max_completion_length}}"


def register_configs() -> None:
    """Store the schema `base_config` (first in config.yaml's defaults) and the sweeps."""
    cs = ConfigStore.instance()
    if not OmegaConf.has_resolver("rlexp_sum"):
        OmegaConf.register_new_resolver("rlexp_sum", lambda *terms: sum(int(t) for t in terms))
    # The root schema types every group's node, so group YAML files need no schema of their own.
    base = OmegaConf.structured(Config)
    base.rollout.kv_cache_size = KV_CACHE_DEFAULT
    cs.store(name="base_config", node=base)
    # sweeps/*.yaml become the `sweep` group (+sweep=NAME), from the wheel or the checkout.
    found = sweeps_dir()
    for path in sorted(found.glob("*.yaml")) if found else []:
        cs.store(group="sweep", name=path.stem, node=OmegaConf.load(path), package="_global_")

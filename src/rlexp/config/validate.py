"""Validation of a Config, in one place: the CHOICES and RANGES tables checked generically,
then the named cross-field rules (rlexp.config.rules). The first refusal is a UserError of one
line, `key=value is invalid: why`."""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Optional

from rlexp.algo.algorithm import algorithms
from rlexp.algo.choices import (ADVANTAGES, KL_ESTIMATORS, LOSS_AGGREGATIONS, LOSSES,
                                RATIO_LEVELS, REWARD_SCALES, ROLLOUT_CORRECTIONS)
from rlexp.base.errors import UserError
from rlexp.config.rules import RULES, Refusal, epoch_steps, rollout_devices
from rlexp.config.schema import Config
from rlexp.families import families


@dataclass(frozen=True)
class OneOf:
    # The valid values, in the order a refusal lists them.
    values: tuple[str, ...] = ()
    # Instead of `values`: the keys of this dict field (checked only when it has any).
    keys_of: Optional[str] = None
    # Also valid: null, as a refusal words it ("null (the algorithm's own)").
    null: Optional[str] = None
    # Also valid: a dotted import path, as a refusal words it ("a dotted path to fn(text)").
    dotted: Optional[str] = None


DTYPES = ("float32", "bfloat16")
# Whether a higher or a lower metric is better.
MODES = ("max", "min")

# Valid values of every choice field. Checked before RANGES: a choice can select other values
# (a bad hardware.gpu_type leaves the figures it selects at 0, which a range would blame).
CHOICES: dict[str, OneOf] = {
    "hardware.gpu_type": OneOf(keys_of="hardware.gpu_specs"),
    "model.family": OneOf(tuple(families())),
    "model.dtype": OneOf(DTYPES),
    "model.param_dtype": OneOf(DTYPES),
    "train.remat": OneOf(("none", "full", "dots_saveable")),
    "model.tokenizer": OneOf(("char", "hf")),
    "algo.kl_estimator": OneOf(KL_ESTIMATORS),
    "algo.loss_agg": OneOf(LOSS_AGGREGATIONS),
    "algo.scale_rewards": OneOf(REWARD_SCALES),
    "algo.ratio_level": OneOf(RATIO_LEVELS, null="null (the algorithm's own)"),
    "algo.loss": OneOf(LOSSES),
    "algo.advantage": OneOf(ADVANTAGES),
    "algo.rollout_correction": OneOf(ROLLOUT_CORRECTIONS),
    "hardware.platform": OneOf(("cpu", "tpu", "gpu")),
    "hardware.split": OneOf(("colocated", "split")),
    "hardware.runtime": OneOf(("single", "multi_controller", "pathways")),
    "dataset.template": OneOf(("reasoning", "answer")),
    "dataset.extractor": OneOf(("none", "gsm8k", "boxed", "regex"),
                               dotted="a dotted path to fn(text)"),
    "rollout.name": OneOf(("vanilla", "vllm")),
    "tracker.name": OneOf(("mlflow", "none")),
    "run.priority": OneOf(("very-low", "low", "medium", "high", "very-high"),
                          null="null (the launcher's own)"),
    "train.lr_schedule": OneOf(("constant", "cosine", "warmup_cosine", "linear")),
    "train.early_stop.mode": OneOf(MODES),
    "train.prune.mode": OneOf(MODES),
    "train.prune.pruner": OneOf(("none", "median")),
    "algo.name": OneOf(tuple(algorithms()),
                       dotted="a dotted path to an rlexp.algo.algorithm.Algorithm"),
}

# Valid interval of every numeric field ("[1, inf)": 1 or more); every value must also be
# finite, and None (an Optional field left unset) is always allowed. One line per field: a
# numeric field added to the schema without a line here fails tests/test_config.py.
RANGES: dict[str, str] = {
    "model.num_layers": "[1, inf)",
    "model.embed_dim": "[1, inf)",
    "model.num_heads": "[1, inf)",
    "model.num_kv_heads": "[1, inf)",
    "model.head_dim": "[1, inf)",
    "model.hidden_dim": "[1, inf)",
    "model.vocab_size": "[1, inf)",
    "model.rope_theta": "(0, inf)",
    "model.logit_scale": "(0, inf)",
    "model.rope_scale": "[1, inf)",
    "model.sliding_window": "[1, inf)",
    "model.norm_eps": "(0, 1)",
    "model.max_position": "[1, inf)",
    "model.warm_start_steps": "[0, 1000000]",  # as train.steps
    "model.warm_start_lr": "(0, inf)",
    "model.warm_start_batch_size": "[1, 65536]",  # as train.batch_size
    "model.lora.rank": "[0, 4096]",  # 0 = off (full fine-tuning)
    "model.lora.alpha": "(0, inf)",
    "algo.beta": "[0, inf)",
    "algo.epsilon": "(0, 1]",  # 1: no lower clip (CISPO)
    "algo.epsilon_high": "(0, inf)",  # above 1: CISPO's IS-weight cap (1 + 4 = TRL's 5.0)
    "algo.sapo_temperature_pos": "(0, inf)",
    "algo.sapo_temperature_neg": "(0, inf)",
    "algo.vespo_k_pos": "[0, inf)",
    "algo.vespo_lambda_pos": "[0, inf)",
    "algo.vespo_k_neg": "[0, inf)",
    "algo.vespo_lambda_neg": "[0, inf)",
    "algo.clip_cov_ratio": "(0, 1]",
    "algo.clip_cov_lb": "(-inf, inf)",
    "algo.clip_cov_ub": "(-inf, inf)",
    "algo.kl_cov_ratio": "(0, 1]",
    "algo.ppo_kl_coef": "[0, inf)",
    "algo.entropy_coef": "(-inf, inf)",  # negative = entropy penalty (TRL allows it)
    "algo.top_entropy_quantile": "[0, 1]",
    # Importance-weight bounds (rules: min below max, one of them set when a mode is on).
    "algo.rollout_correction_clip_min": "[0, inf)",
    "algo.rollout_correction_clip_max": "(0, inf)",
    # Group-relative advantages need two completions; 1024 per prompt is past any recipe
    # (DeepSeek-R1: 16) and each one is a sampler row: more only exhausts memory.
    "algo.num_generations": "[2, 1024]",
    # Updates per rollout batch (GRPO recipes: 1-4); the learning-rate table holds
    # train.steps x num_iterations x mini-batches floats.
    "algo.num_iterations": "[1, 64]",
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
    "hardware.join_timeout_s": "[1, 3600]",
    "hardware.heartbeat_timeout_s": "[2, 3600]",
    "dataset.num_train": "[1, inf)",
    "dataset.num_eval": "[1, inf)",
    "dataset.seed": "[0, 4294967295]",  # NumPy seeds are unsigned 32-bit
    "dataset.min_terms": "[1, inf)",
    "dataset.max_terms": "[1, inf)",
    "dataset.min_digits": "[1, inf)",
    "dataset.max_digits": "[1, inf)",
    "dataset.eval_fraction": "(0, 1)",
    "dataset.max_truncated_fraction": "[0, 1]",  # 0 = no prompt may be cut, 1 = any may
    "rollout.temperature": "(0, inf)",
    "rollout.top_p": "(0, 1]",
    "rollout.top_k": "[1, inf)",
    # Token lengths: 131072 is the longest context of any shipped model (Llama 3.1, 128k);
    # the KV cache holds both lengths at their cap. Past that only the allocation fails.
    "rollout.max_prompt_length": "[1, 131072]",
    "rollout.max_completion_length": "[1, 131072]",
    "rollout.kv_cache_size": "[2, 262144]",
    # -1: derived from the rollout devices (resolve_parallel_sizes); 0: rules
    # (vllm_parallelism_tiles_the_rollout_mesh).
    "rollout.tensor_parallel_size": "[-1, inf)",
    "rollout.data_parallel_size": "[-1, inf)",
    "rollout.replicas": "[1, inf)",  # rules: divides hardware.rollout_mesh.fsdp
    "rollout.per_device_batch_size": "[1, 65536]",  # as rollout.micro_batch_size
    "rollout.hbm_utilization": "(0, 1]",
    "rollout.sync_every": "[1, 1000000]",  # as train.steps
    "tracker.flush_every_s": "[0, inf)",
    "tracker.system_metrics_every_s": "[0, inf)",  # 0 = off
    "tracker.log_completions_every": "[0, inf)",  # 0 = off, None = eval.every
    "train.early_stop.patience": "[1, inf)",
    "train.early_stop.min_delta": "[0, inf)",
    "train.prune.startup_jobs": "[0, inf)",
    "train.prune.warmup_steps": "[0, inf)",
    "run.profile_steps": "[1, inf)",
    "run.cache_keep": "[1, inf)",
    "reward.functions.weight": "(-inf, inf)",  # negative = a penalty
    # 1M steps is 11 days at 1 s a step; the loop's learning-rate table holds one float per
    # optimizer update (10M: 0.5 GB), and past 2**63 NumPy cannot even index it
    # ("ValueError: Maximum allowed size exceeded" after the first evaluation).
    "train.steps": "[1, 1000000]",
    # Prompts per step (RL recipes: 8-1024): 65536 x num_generations completions per step is
    # far past any accelerator's memory; the bound keeps step x batch index arithmetic exact.
    "train.batch_size": "[1, 65536]",
    "train.mini_batch_size": "[1, 65536]",
    "train.micro_batch_size": "[1, 65536]",
    "rollout.micro_batch_size": "[1, 65536]",
    "train.learning_rate": "(0, inf)",
    "train.end_learning_rate": "[0, inf)",  # 0 = decay to zero
    # Passes over the training prompts (EasyDeL's GRPO tutorial: 3); the steps they make are
    # held to train.steps' range too (rules: epochs_steps_in_range).
    "train.epochs": "[1, 1000]",
    "train.warmup_steps": "[0, inf)",
    "train.grad_clip": "[0, inf)",  # 0 = off
    "train.weight_decay": "[0, inf)",
    "train.seed": "[0, 4294967295]",
    "train.checkpoint_every": "[0, inf)",  # 0 = only at the end
    "train.keep_checkpoints": "[1, inf)",
    "eval.every": "[0, inf)",  # 0 = only before and after
    "eval.num_samples": "[1, inf)",
    "eval.pass_k": "[1, 1024]",  # sampled completions per prompt, as algo.num_generations
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


def numeric_keys(schema: Optional[type] = None, prefix: str = "") -> list[str]:
    """Dotted keys of every int/float field of the schema (Optional ones too; bools are not)."""
    schema = schema or Config
    out: list[str] = []
    for name, hint in typing.get_type_hints(schema).items():
        args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        if dataclasses.is_dataclass(args[0]):
            out += numeric_keys(args[0], f"{prefix}{name}.")
        elif args[0] in (int, float):
            out.append(f"{prefix}{name}")
    return out


def leaves(obj: Any, dotted: str, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, value) of `dotted` under obj; a list field yields one per item (key.N.x),
    a missing field none (a renamed or removed one: tests/test_config.py says so)."""
    if isinstance(obj, (list, tuple)):
        return [kv for i, item in enumerate(obj) for kv in leaves(item, dotted, f"{prefix}{i}.")]
    if not dotted:
        return [(prefix.rstrip("."), obj)]
    head, _, rest = dotted.partition(".")
    if not hasattr(obj, head):
        return []
    return leaves(getattr(obj, head), rest, f"{prefix}{head}.")


def choice_refusal(cfg: Config) -> Optional[Refusal]:
    """The first CHOICES field whose value is not one of its choices."""
    for key, spec in CHOICES.items():
        valid = spec.values
        if spec.keys_of is not None:
            valid = tuple(sorted(attrgetter(spec.keys_of)(cfg)))
            if not valid:
                continue
        for shown, value in leaves(cfg, key):
            if value in valid or (spec.null and value is None) or \
                    (spec.dotted and isinstance(value, str) and "." in value):
                continue
            listed = ", ".join(valid) + (f", {spec.null}" if spec.null else "") + \
                (f", or {spec.dotted}" if spec.dotted else "")
            return Refusal(shown, value, f"valid choices are {listed}")
    return None


def range_refusal(cfg: Config) -> Optional[Refusal]:
    """The first RANGES field whose value lies outside its interval (None passes)."""
    for key, interval in RANGES.items():
        for shown, value in leaves(cfg, key):
            if value is not None and not isinstance(value, bool) and not in_range(value, interval):
                return Refusal(shown, value, f"must be in {interval}")
    return None


def resolve_parallel_sizes(tp: int, dp: int, devices: int) -> tuple[int, int]:
    """vLLM's tensor and data parallel sizes, a -1 derived as Tunix 0.1.7 does
    (tunix/generate/utils.py resolve_parallelism_sizes, expert parallelism 1): both -1 is TP =
    every rollout device and DP 1 (MaxText rl.yml's default); one -1 is the devices over the
    other. A 0 stays for the rules to refuse."""
    if tp == -1 and dp == -1:
        return devices, 1
    if tp == -1 and dp > 0:
        return devices // dp, dp
    if dp == -1 and tp > 0:
        return tp, devices // tp
    return tp, dp


def validate(cfg: Config) -> Config:
    """The tables, then the rules, in order: UserError (one line) for the first refusal. Between
    them (inputs in range, results checked by the rules) train.steps is derived from
    train.epochs when set, and a vLLM parallel size of -1 from the rollout devices."""
    for check in (choice_refusal, range_refusal):
        refusal = check(cfg)
        if refusal is not None:
            raise UserError(refusal.message)
    if cfg.train.epochs is not None:
        cfg.train.steps = epoch_steps(cfg.train.epochs, cfg.dataset.num_train, cfg.train.batch_size)
    r = cfg.rollout
    r.tensor_parallel_size, r.data_parallel_size = resolve_parallel_sizes(
        r.tensor_parallel_size, r.data_parallel_size, rollout_devices(cfg))
    for rule in RULES:
        refusal = rule.check(cfg)
        if refusal is not None:
            raise UserError(refusal.message)
    return cfg

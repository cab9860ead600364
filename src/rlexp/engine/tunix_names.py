"""Every private (or monkeypatched) Tunix name rlexp relies on, in one list.

Tunix has no public hook for one global step at a time, per-update metrics, resumable counters,
a key per sampler call or RoPE theta, so the engine reads these names of google-tunix 0.1.7
(PrivateApi entries, here because the per-family names come from rlexp.families).
tests/test_tunix_contract.py checks each, and `rlexp.engine.build` runs `problems()`: a Tunix
upgrade stops with one line naming what changed. `PATCHES` lists the process-wide changes the
engine still makes where Tunix offers no hook (tests/test_engine_extension.py holds it to them).
"""

from __future__ import annotations

import dataclasses

from rlexp.base import private_apis
from rlexp.base.private_apis import PrivateApi, check
from rlexp.families import families

# What the pins in pyproject.toml install; named in the error so the fix is obvious.
TESTED_VERSION = "0.1.7"


def Name(owner: str, name: str, kind: str, params: tuple[str, ...] | None = None,  # noqa: N802
         positional: bool = False, why: str = "", read_by: str | None = None) -> PrivateApi:
    """A Tunix entry: `owner` is "module:Class" or "module"; `params` are checked by keyword
    unless `positional`."""
    return PrivateApi("google-tunix", TESTED_VERSION, owner, name, kind, params,
                      used_by="src/rlexp/engine/", why=why, positional=positional,
                      read_by=read_by)


_LEARNER = "tunix.rl.rl_learner:RLLearner"
_GRPO = "tunix.rl.grpo.grpo_learner:GRPOLearner"
_PEFT = "tunix.sft.peft_trainer:PeftTrainer"
_CLUSTER = "tunix.rl.rl_cluster:RLCluster"
_VANILLA = "tunix.rl.rollout.vanilla_rollout:VanillaRollout"
_TRAINING = "tunix.rl.rl_cluster:RLTrainingConfig"
_CKPT = "tunix.sft.checkpoint_manager:CheckpointManager"
_ROLLOUT_CONFIG = "tunix.rl.rollout.base_rollout:RolloutConfig"

NAMES: tuple[PrivateApi, ...] = (
    # engine/learner.py StepRunner: one global step without RLLearner.train's loop.
    Name(_LEARNER, "_training_config", "attribute", why="mini/micro batch sizes"),
    Name(_LEARNER, "_rollout_micro_batch_size", "attribute", why="rollout micro-batch"),
    Name(_LEARNER, "_compute_logps_micro_batch_size", "attribute", why="logps micro-batch"),
    Name(_LEARNER, "_create_micro_batch_iterator", "method",
         ("full_batch_iterator", "micro_batch_size"), True, why="StepRunner splits the batch"),
    Name(_LEARNER, "_run_global_step", "method",
         ("full_batch_size", "mini_batch_size", "service_target_batch_size", "grad_acc_steps",
          "train_iterator", "eval_ds", "skip_jit"), True, why="StepRunner"),
    Name(_LEARNER, "should_sync_weights", "attribute", why="StepRunner and resume"),
    Name(_LEARNER, "can_enable_async_rollout", "attribute",
         why="rollout.off_policy_steps: StepRunner samples on a thread beside the update"),
    Name(_TRAINING, "rollout_micro_batch_size", "field", why="rollout.micro_batch_size"),
    Name(_TRAINING, "compute_logps_micro_batch_size", "field",
         why="rollout.micro_batch_size (reference and old log-prob passes)"),
    # engine/checkpoint_store.py: the counters a resume sets back.
    Name(_LEARNER, "_iter_steps", "attribute", why="checkpoint counters"),
    Name(_LEARNER, "_last_iter_step", "attribute", why="checkpoint counters"),
    Name(_PEFT, "_train_steps", "attribute", why="checkpoint counters"),
    Name(_PEFT, "_iter_steps", "attribute", why="checkpoint counters"),
    Name(_CLUSTER, "global_steps", "attribute", why="checkpoint counters, StepRunner"),
    Name(_CKPT, "_checkpoint_manager", "attribute",
         why="orbax manager: wait_until_finished, reload, all_steps"),
    Name(_CKPT, "save", "method",
         ("step", "model", "optimizer", "save_only_lora_params", "force", "custom_metadata")),
    Name(_CKPT, "maybe_restore", "method", ("model", "optimizer", "step")),
    # engine/learner.py: hooks rlexp's subclasses override (metrics, timing, after sampling).
    Name(_PEFT, "_post_process_train_step", "method", ("aux",), True,
         why="ActorTrainer hands each update's aux to the probe"),
    Name(_PEFT, "_buffered_train_metrics", "attribute", why="ActorTrainer reads loss, grad_norm"),
    Name("tunix.sft.peft_trainer:MetricsBuffer", "losses", "field", why="probe"),
    Name("tunix.sft.peft_trainer:MetricsBuffer", "additional_metrics", "field",
         why="probe reads ['grad_norm']"),
    Name("tunix.rl.trainer:Trainer", "with_rl_metrics_to_log", "method", ("rl_metrics_to_log",),
         why="Learner turns off Tunix's aux logging"),
    Name(_GRPO, "_generate_and_compute_advantage", "method", ("training_input", "mode"), True,
         why="Learner overrides it: rlexp's steps after sampling (whitening, the sampler's "
             "log-probs, the probe)"),
    Name(_CLUSTER, "generate", "method", ("prompts", "mode", "micro_batch_size"),
         why="Cluster overrides it (probe timing, a TRAIN call's log-probs); evaluation calls it"),
    Name(_CLUSTER, "_init_cluster", "method", (), why="Cluster builds its trainers in it"),
    Name("tunix.rl.rl_cluster", "rl_trainer", "global", read_by="RLCluster._init_cluster",
         why="_init_cluster builds the actor trainer as rl_trainer.Trainer (PATCHES)"),
    # engine/rollout/vanilla.py: its Rollout subclass; the learner's pad/eos reads.
    Name(_CLUSTER, "rollout", "property", why="the learner reads the rollout's pad and eos ids"),
    # VanillaRollout's only: rlexp reads no VllmRollout._sampler (its module imports vllm, so
    # that entry could not be checked here; tests/test_private_apis.py keeps the reads vanilla).
    Name(_VANILLA, "_sampler", "attribute",
         why="old log-probs at the sampling temperature; prompt ids memoized"),
    Name(_VANILLA, "generate", "method", ("prompts", "rollout_config"), True,
         why="rollout.vanilla.Rollout overrides it: a fresh key per call"),
    Name(_VANILLA, "get_per_token_logps", "method", ("prompt_tokens", "completion_tokens"),
         True, why="rollout.vanilla.Rollout overrides it to pass the temperature"),
    Name("tunix.generate.sampler:Sampler", "model_def_and_state", "method", ()),
    Name("tunix.generate.sampler:Sampler", "tokenizer", "attribute",
         why="prompt ids memoized (tokenize once per distinct prompt)"),
    Name("tunix.generate.sampler:Sampler", "tokenize", "method", ("input_string",), True,
         why="calls tokenizer.encode(text) and copies the ids"),
    Name(_ROLLOUT_CONFIG, "seed", "field", why="the backends' SamplingKeys set it per call"),
    # engine/tunix_models.py: the RoPE base patch (attention reads the module global).
    *(Name(f"{f.tunix_package}.model", "apply_rope", "function",
           ("inputs", "positions", "head_dim", "rope_theta"))
      for f in families().values() if "rope_theta" in f.patches),
    # engine/tunix_patches.py: training-only remat wraps DecoderLayer.__call__ (same params).
    *(Name(f"{f.tunix_package}.model:DecoderLayer", method, "method", ("x", "cache"),
           why="train.remat wrapper")
      for f in families().values() for method in ("__call__", "block")),
    # engine/tunix_models.py: each family's model class and loader, by the names it gives.
    *(Name(f"{f.tunix_package}.model", f.model_class, "class", why="model.family")
      for f in families().values()),
    *(Name(f"{f.tunix_package}.{f.loader_module}", "create_model_from_safe_tensors", "function",
           ("file_dir", "config", "mesh", "dtype"), why="model.path loader")
      for f in families().values()),
    # engine/learner.py Learner._prepare_data: a window's micro-batches, then its divisors.
    Name(_LEARNER, "_prepare_data", "method", ("iterator", "data_queue", "mode"),
         why="WindowQueue stands in for its training data queue"),
    Name("tunix.rl.queue.data_queue:SimpleDataQueue", "put", "method", ("item",), True,
         why="WindowQueue.put has its signature"),
    # engine/algo_registry.py: rlexp's loss and advantage registered by name, reading these.
    Name(_GRPO, "algo_config.temperature", "attribute",
         why="the loss's forward runs at the rollout temperature GRPOLearner copies here"),
    *(Name("tunix.rl.grpo.grpo_learner:GRPOConfig", f, "field", why="AlgoSettings fills it")
      for f in ("num_generations", "num_iterations", "beta", "epsilon", "loss_algo",
                "kl_loss_mode", "loss_agg_mode", "policy_loss_fn", "advantage_estimator")),
    *(Name("tunix.rl.grpo.grpo_learner:TrainExample", f, "field", why="the loss reads it")
      for f in ("prompt_ids", "completion_ids", "completion_mask", "advantages",
                "ref_per_token_logps", "old_per_token_logps")),
    *(Name("tunix.rl.rollout.base_rollout:RolloutOutput", f, "field", why="probe, evaluation")
      for f in ("text", "tokens", "left_padded_prompt_tokens")),
    # engine/learner.py Learner.with_sampler_logps: the sampler's log-probs, the trainer's forward.

    Name("tunix.rl.rollout.base_rollout:RolloutOutput", "logprobs", "field",
         why="the sampler's per-token log-probs (trainer/sampler gap, rollout correction)"),
    Name(_ROLLOUT_CONFIG, "return_logprobs", "field", why="asks the sampler for them"),
    Name(_CLUSTER, "r2m", "attribute", why="the actor mesh of the trainer's log-prob pass"),
    Name("tunix.rl.function_registry", "register_policy_loss_fn", "function", ("name",)),
    Name("tunix.rl.function_registry", "register_advantage_estimator", "function", ("name",)),
    Name("tunix.rl.common", "compute_per_token_logps", "function",
         ("graphdef", "state", "prompt_tokens", "completion_tokens", "pad_id", "eos_id",
          "stop_gradient", "return_logits", "temperature")),
)


@dataclasses.dataclass(frozen=True)
class Patch:
    """A change every object of a class (or reader of a module global) in the process sees."""

    # What is replaced: "module:Class.attribute" or "module.global".
    target: str
    # The function of rlexp.engine that sets it (and sets it back): "module.function".
    by: str
    # Why no hook, argument or subclass of the library's does it.
    why: str


PATCHES: tuple[Patch, ...] = (
    Patch("tunix.models.<family>.model:DecoderLayer.__call__", "tunix_patches.use_training_remat",
          "train.remat: Tunix's RematConfig.DECODER crashes in the sampler, and the model class "
          "builds its DecoderLayers itself (no argument names the layer class)"),
    Patch("tunix.models.<family>.model:<model_class>.__call__, "
          "tunix.generate.sampler:Sampler.dtype", "tunix_patches.use_compute_dtype",
          "model.dtype below model.param_dtype: llama3 and gemma3 have no compute dtype in 0.1.7, "
          "and VanillaRollout builds the Sampler that sizes its KV cache by Sampler.dtype"),
    Patch("tunix.models.<family>.model.apply_rope", "tunix_models.use_rope_theta",
          "model.rope_theta: the attention calls the module's apply_rope without the config's "
          "theta"),
    Patch("tunix.rl.trainer.Trainer", "learner.Cluster._init_cluster",
          "RLCluster builds its trainers as rl_trainer.Trainer, with no argument for the class: "
          "ActorTrainer while it builds, then set back"),
    Patch("sys.unraisablehook", "checkpoint_store.quiet_orbax_failures",
          "Python's hook for exceptions raised in other threads, where orbax echoes a failed "
          "save's error"),
)


def problems() -> list[str]:
    """One line per name that no longer matches (empty when all hold)."""
    return [f"{entry.label()} {why}" for entry in NAMES if (why := check(entry))]


def installed_version() -> str:
    return private_apis.installed_version("google-tunix")

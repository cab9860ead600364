"""Every private (or monkeypatched) Tunix name rlexp relies on, in one list.

Tunix has no public hook for what rlexp needs (one global step at a time, per-update metrics,
resumable step counters, a fresh PRNG key per sampler call, RoPE theta), so the engine reaches into
these names, read from google-tunix 0.1.7. Each is a rlexp.base.private_apis.PrivateApi (listed
here, not there, because the per-family names come from rlexp.families):
tests/test_tunix_contract.py checks each in the fast tier, tests/test_private_apis.py fails on a
private name used in src/ that no list holds, and `rlexp.engine.build` runs `problems()` so a Tunix
upgrade stops with one line naming what changed instead of a traceback deep in a step.
"""

from __future__ import annotations

from rlexp.base import private_apis
from rlexp.base.private_apis import PrivateApi, check
from rlexp.families import families

# What the pins in pyproject.toml install; named in the error so the fix is obvious.
TESTED_VERSION = "0.1.7"


def Name(owner: str, name: str, kind: str, params: tuple[str, ...] | None = None,  # noqa: N802
         positional: bool = False, why: str = "") -> PrivateApi:
    """A Tunix entry: `owner` is "module:Class" or "module"; `params` are checked by keyword
    unless `positional`."""
    return PrivateApi("google-tunix", TESTED_VERSION, owner, name, kind, params,
                      used_by="src/rlexp/engine/", why=why, positional=positional)


_LEARNER = "tunix.rl.rl_learner:RLLearner"
_GRPO = "tunix.rl.grpo.grpo_learner:GRPOLearner"
_PEFT = "tunix.sft.peft_trainer:PeftTrainer"
_CLUSTER = "tunix.rl.rl_cluster:RLCluster"
_VANILLA = "tunix.rl.rollout.vanilla_rollout:VanillaRollout"
_TRAINING = "tunix.rl.rl_cluster:RLTrainingConfig"
_CKPT = "tunix.sft.checkpoint_manager:CheckpointManager"
_ROLLOUT_CONFIG = "tunix.rl.rollout.base_rollout:RolloutConfig"

NAMES: tuple[PrivateApi, ...] = (
    # engine/tunix_adapter.py StepRunner: one global step without RLLearner.train's loop.
    Name(_LEARNER, "_training_config", "attribute", why="mini/micro batch sizes"),
    Name(_LEARNER, "_rollout_micro_batch_size", "attribute", why="rollout micro-batch"),
    Name(_LEARNER, "_compute_logps_micro_batch_size", "attribute", why="logps micro-batch"),
    Name(_LEARNER, "_create_micro_batch_iterator", "method",
         ("full_batch_iterator", "micro_batch_size"), True, why="StepRunner splits the batch"),
    Name(_LEARNER, "_run_global_step", "method",
         ("full_batch_size", "mini_batch_size", "service_target_batch_size", "grad_acc_steps",
          "train_iterator", "eval_ds", "skip_jit"), True, why="StepRunner"),
    Name(_LEARNER, "should_sync_weights", "attribute", why="StepRunner and resume"),
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
    # engine/probes.py: per-update metrics and rollout timing, wrapped on the instances.
    Name(_PEFT, "_post_process_train_step", "method", ("aux",), True, why="probe wraps it"),
    Name(_PEFT, "_buffered_train_metrics", "attribute", why="probe reads loss, grad_norm"),
    Name("tunix.sft.peft_trainer:MetricsBuffer", "losses", "field", why="probe"),
    Name("tunix.sft.peft_trainer:MetricsBuffer", "additional_metrics", "field",
         why="probe reads ['grad_norm']"),
    Name("tunix.rl.trainer:Trainer", "with_rl_metrics_to_log", "method", ("rl_metrics_to_log",),
         why="probe turns off Tunix's aux logging"),
    Name(_GRPO, "_generate_and_compute_advantage", "method", ("training_input", "mode"),
         why="probe times it and reads the completion mask; algo_registry.after_scoring "
             "runs rlexp's steps on its output (whitening, the sampler's log-probs)"),
    Name(_CLUSTER, "generate", "method", ("prompts", "mode", "micro_batch_size"),
         why="probe wraps it; evaluation calls it"),
    # engine/tunix_adapter.py SamplingKeys and trap 5 (old log-probs at the temperature).
    Name(_CLUSTER, "rollout", "property", why="SamplingKeys patches rollout.generate"),
    # VanillaRollout's only: rlexp reads no VllmRollout._sampler (its module imports vllm, so
    # that entry could not be checked here; tests/test_private_apis.py keeps the reads vanilla).
    Name(_VANILLA, "_sampler", "attribute",
         why="old log-probs at the sampling temperature; prompt ids memoized"),
    Name(_VANILLA, "generate", "method", ("prompts", "rollout_config"), True,
         why="SamplingKeys wraps it with a fresh seed"),
    Name(_VANILLA, "get_per_token_logps", "method", ("prompt_tokens", "completion_tokens"),
         True, why="replaced to pass the temperature"),
    Name("tunix.generate.sampler:Sampler", "model_def_and_state", "method", ()),
    Name("tunix.generate.sampler:Sampler", "tokenizer", "attribute",
         why="prompt ids memoized (tokenize once per distinct prompt)"),
    Name("tunix.generate.sampler:Sampler", "tokenize", "method", ("input_string",), True,
         why="calls tokenizer.encode(text) and copies the ids"),
    Name(_ROLLOUT_CONFIG, "seed", "field", why="SamplingKeys replaces it per call"),
    # engine/tunix_models.py: the RoPE base patch (attention calls the module global), for the
    # families whose patches name rope_theta.
    *(Name(f"{f.tunix_package}.model", "apply_rope", "function",
           ("inputs", "positions", "head_dim", "rope_theta"))
      for f in families().values() if "rope_theta" in f.patches),
    # engine/tunix_patches.py: training-only remat wraps DecoderLayer.__call__ around its block
    # (the same parameters in the same order; the cache is found by name).
    *(Name(f"{f.tunix_package}.model:DecoderLayer", method, "method", ("x", "cache"),
           why="train.remat wrapper")
      for f in families().values() for method in ("__call__", "block")),
    # engine/tunix_models.py: each family's model class and loader, by the names it gives.
    *(Name(f"{f.tunix_package}.model", f.model_class, "class", why="model.family")
      for f in families().values()),
    *(Name(f"{f.tunix_package}.{f.loader_module}", "create_model_from_safe_tensors", "function",
           ("file_dir", "config", "mesh", "dtype"), why="model.path loader")
      for f in families().values()),
    # engine/algo_registry.py normalise_over_windows: a window's micro-batches, then its divisors.
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
    # engine/algo_registry.py correct_rollouts (a step of after_scoring): the sampler's
    # log-probs, the trainer's forward.
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


def problems() -> list[str]:
    """One line per name that no longer matches (empty when all hold)."""
    return [f"{entry.label()} {why}" for entry in NAMES if (why := check(entry))]


def installed_version() -> str:
    return private_apis.installed_version("google-tunix")

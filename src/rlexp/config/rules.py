"""The named rules a Config must keep beyond its fields' ranges and choices (validate applies
RULES in order). Each needs only the Config; checks that need the world are pre-flight's."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional

from rlexp.algo import algorithm
from rlexp.config.refusal import Refusal
from rlexp.config.rollouts import rollout_spec
from rlexp.config.schema import MAX_STEPS, Config
from rlexp.families import get as get_family


@dataclass(frozen=True)
class Rule:
    name: str  # named in tests and README.md's rule table
    # cfg -> a Refusal, or None when the config keeps the rule (or UserError in its own words).
    check: Callable[[Config], Optional[Refusal]]


def _algo_imports(cfg: Config) -> Optional[Refusal]:
    # The choice table lets a dotted algo.name through; it must import as an Algorithm.
    if cfg.algo.name not in algorithm.algorithms():
        algorithm.get(cfg.algo.name)  # UserError naming algo.name when it does not import
    return None


def _epsilon_high(cfg: Config) -> Optional[Refusal]:
    a = cfg.algo
    if a.epsilon_high is None or a.epsilon <= a.epsilon_high:
        return None
    return Refusal("algo.epsilon_high", a.epsilon_high,
                   f"must be >= algo.epsilon ({a.epsilon}) and < 1")


def _rollout_correction(cfg: Config) -> Optional[Refusal]:
    # As TRL 1.16 GRPOConfig.__post_init__: no bound, bounds out of order, VESPO with sequence.
    a = cfg.algo
    lo, hi = a.rollout_correction_clip_min, a.rollout_correction_clip_max
    if a.rollout_correction == "none":
        return None
    if lo is None and hi is None:
        return Refusal("algo.rollout_correction_clip_max", hi,
                       f"algo.rollout_correction={a.rollout_correction} needs a bound: set "
                       "rollout_correction_clip_max (TRL: 3.0) or rollout_correction_clip_min")
    if lo is not None and hi is not None and lo >= hi:
        return Refusal("algo.rollout_correction_clip_min", lo,
                       f"must be below algo.rollout_correction_clip_max ({hi})")
    # A *_mask mode zeroes weights outside the bounds: without 1 inside, every token whose
    # sampler and trainer agree (weight 1) leaves the loss.
    for key, bound, outside in (("clip_min", lo, lo is not None and lo > 1.0),
                                ("clip_max", hi, hi is not None and hi < 1.0)):
        if a.rollout_correction.endswith("_mask") and outside:
            return Refusal(f"algo.rollout_correction_{key}", bound, f"must leave 1 within the "
                           f"bounds: algo.rollout_correction={a.rollout_correction} would mask "
                           "every token whose sampler and trainer agree (weight 1)")
    if a.loss == "vespo" and a.rollout_correction.startswith("sequence"):
        return Refusal("algo.rollout_correction", a.rollout_correction,
                       "algo.loss=vespo takes token_truncate or token_mask (its gamma weight "
                       "is already per sequence)")
    return None


def _loss_knobs_act(cfg: Config) -> Optional[Refusal]:
    # Values that leave the loss's own mechanism nothing to act on.
    a = cfg.algo
    if a.loss == "clip_cov" and a.clip_cov_lb >= a.clip_cov_ub:
        return Refusal("algo.clip_cov_lb", a.clip_cov_lb, f"must be below algo.clip_cov_ub "
                       f"({a.clip_cov_ub}): no covariance lies between, Clip-Cov cuts nothing")
    if a.delta is not None and a.loss not in ("ppo_clip", "luspo"):
        return Refusal("algo.delta", a.delta, f"caps the ratio of algo.loss=ppo_clip or luspo "
                       f"only (TRL's clipped losses); algo.loss={a.loss}: leave it null")
    return None


def _profile_steps(cfg: Config) -> Optional[Refusal]:
    ps = cfg.run.profile_steps
    if len(ps) == 2 and ps[0] > cfg.train.steps:  # no trace at all (MaxText's profiler refuses too)
        return Refusal("run.profile_steps", list(ps), f"first step {ps[0]} is past train.steps="
                       f"{cfg.train.steps}: pick first in [1, {cfg.train.steps}]")
    if len(ps) == 0 or len(ps) == 2 and ps[0] <= ps[1]:
        return None
    return Refusal("run.profile_steps", list(ps),
                   "must be [] or [first, last] with first <= last (global steps, e.g. [2,3])")


def batch_sizes(cfg: Config) -> tuple[int, int]:
    """(mini-batch, micro-batch) in prompts, their nulls resolved."""
    t = cfg.train
    mini = t.mini_batch_size or t.batch_size
    return mini, t.micro_batch_size or mini


def _mini_divides_batch(cfg: Config) -> Optional[Refusal]:
    t = cfg.train
    mini, _ = batch_sizes(cfg)
    if t.batch_size % mini == 0:
        return None
    return Refusal("train.mini_batch_size", t.mini_batch_size,
                   f"must divide train.batch_size ({t.batch_size})")


def _micro_divides_mini(cfg: Config) -> Optional[Refusal]:
    mini, micro = batch_sizes(cfg)
    if mini % micro == 0:
        return None
    return Refusal("train.micro_batch_size", cfg.train.micro_batch_size,
                   f"must divide the mini-batch size ({mini})")


def rollout_devices(cfg: Config) -> int:
    """Devices of the rollout mesh (all replicas together)."""
    mesh = cfg.hardware.rollout_mesh
    return mesh.fsdp * mesh.tp


def sampler_call_prompts(cfg: Config) -> Optional[int]:
    """Prompts per sampler call the config fixes (None: the plan sizes it)."""
    r = cfg.rollout
    if r.per_device_batch_size is None:
        return r.micro_batch_size
    mini, _ = batch_sizes(cfg)
    return min(r.per_device_batch_size * rollout_devices(cfg), mini)


def _rollout_batch_set_once(cfg: Config) -> Optional[Refusal]:
    r = cfg.rollout
    if r.per_device_batch_size is None or r.micro_batch_size is None:
        return None
    return Refusal("rollout.per_device_batch_size", r.per_device_batch_size,
                   f"sizes the sampler call as rollout.micro_batch_size={r.micro_batch_size} "
                   "does: set one of them (the other null)")


def _rollout_micro_batch(cfg: Config) -> Optional[Refusal]:
    # Tunix packs a mini-batch into calls of this many prompts: a ragged last call recompiles.
    rm = sampler_call_prompts(cfg)
    mini, micro = batch_sizes(cfg)
    if rm is None or ((rm % micro == 0 or micro % rm == 0) and (mini % rm == 0 or rm % mini == 0)):
        return None
    r = cfg.rollout
    if r.per_device_batch_size is None:
        return Refusal("rollout.micro_batch_size", rm, f"must divide or be a multiple of both "
                       f"the train micro batch ({micro}) and the mini-batch ({mini})")
    return Refusal("rollout.per_device_batch_size", r.per_device_batch_size,
                   f"x {rollout_devices(cfg)} rollout devices = {rm} prompts a sampler call, "
                   f"which must divide or be a multiple of both the train micro batch ({micro}) "
                   f"and the mini-batch ({mini})")


def _kv_cache(cfg: Config) -> Optional[Refusal]:
    r = cfg.rollout
    if r.kv_cache_size >= r.max_prompt_length + r.max_completion_length:
        return None
    return Refusal("rollout.kv_cache_size", r.kv_cache_size,
                   "must be >= rollout.max_prompt_length + rollout.max_completion_length")


def _eval_samples(cfg: Config) -> Optional[Refusal]:
    num_eval = cfg.dataset.num_eval
    if 1 <= cfg.eval.num_samples <= num_eval:
        return None
    return Refusal("eval.num_samples", cfg.eval.num_samples,
                   f"must be in [1, dataset.num_eval={num_eval}]")


def _train_set_fills_a_batch(cfg: Config) -> Optional[Refusal]:
    d, t = cfg.dataset, cfg.train
    if d.num_train >= t.batch_size:
        return None
    return Refusal("dataset.num_train", d.num_train,
                   f"must be >= train.batch_size ({t.batch_size})")


def _operators(cfg: Config) -> Optional[Refusal]:
    ops = cfg.dataset.operators
    if ops and set(ops) <= set("+-*/"):
        return None
    return Refusal("dataset.operators", ops, "must be a non-empty subset of '+-*/'")


def _ordered_from_one(field: str) -> Callable[[Config], Optional[Refusal]]:
    """dataset.min_<field> >= 1 and dataset.max_<field> >= it."""
    def rule(cfg: Config) -> Optional[Refusal]:
        low, high = getattr(cfg.dataset, f"min_{field}"), getattr(cfg.dataset, f"max_{field}")
        if 1 <= low <= high:
            return None
        return Refusal(f"dataset.max_{field}", high, f"must be >= dataset.min_{field} ({low}) >= 1")
    return rule


def _answer_regex(cfg: Config) -> Optional[Refusal]:
    d = cfg.dataset
    if d.extractor == "regex" and not d.answer_regex:
        return Refusal("dataset.answer_regex", d.answer_regex,
                       "must be set when dataset.extractor=regex")
    return None


def _answer_regex_compiles(cfg: Config) -> Optional[Refusal]:
    # Compiled here, not at the first completion (a traceback after the engine was built).
    pattern = cfg.dataset.answer_regex
    if not pattern:
        return None
    try:
        re.compile(pattern)
    except re.error as exc:
        return Refusal("dataset.answer_regex", pattern, f"not a Python regular expression ({exc})")
    return None


# MLflow's limits on names (mlflow/utils/validation.py; the runs table's String(250) `name` in
# dbmodels/models.py, enforced by PostgreSQL and MySQL): a longer name failed mid-run.
MAX_EXPERIMENT_NAME = 500
MAX_RUN_NAME = 250


def _shown(text: str, keep: int = 40) -> str:
    return text if len(text) <= keep else f"{text[:keep]}...({len(text)} characters)"


def _tracker_names(cfg: Config) -> Optional[Refusal]:
    t = cfg.tracker
    if t.name != "mlflow":
        return None
    if len(t.experiment) > MAX_EXPERIMENT_NAME:
        return Refusal("tracker.experiment", _shown(t.experiment),
                       f"MLflow takes experiment names of at most {MAX_EXPERIMENT_NAME} characters")
    if t.run_name is not None and len(t.run_name) > MAX_RUN_NAME:
        return Refusal("tracker.run_name", _shown(t.run_name),
                       f"MLflow stores run names of at most {MAX_RUN_NAME} characters")
    return None


# Builders that generate their problems (no file to read).
GENERATED_DATASETS = ("rlexp.data.loaders.arithmetic", "rlexp.data.loaders.gsm_symbolic")


def _generated_dataset_reads_no_file(cfg: Config) -> Optional[Refusal]:
    d = cfg.dataset
    if d._target_ not in GENERATED_DATASETS or not (d.path or d.hub):
        return None
    return Refusal("dataset.path" if d.path else "dataset.hub", d.path or d.hub,
                   f"{d._target_} generates its problems and would ignore it; pick a file "
                   f"dataset (dataset=gsm8k, or dataset._target_=rlexp.data.loaders.generic)")


def _meshes_fill_devices(cfg: Config) -> Optional[Refusal]:
    h = cfg.hardware
    for role, frac in (("trainer_mesh", h.trainer_fraction), ("rollout_mesh", h.sampler_fraction)):
        mesh = getattr(h, role)
        avail = h.devices if h.split == "colocated" else int(round(h.devices * frac))
        if mesh.fsdp * mesh.tp != avail:
            return Refusal(f"hardware.{role}", f"fsdp={mesh.fsdp},tp={mesh.tp}",
                           f"fsdp*tp must equal the {avail} devices this role gets")
    return None


def epoch_steps(epochs: int, num_train: int, batch_size: int) -> int:
    """Global steps of `epochs` passes over `num_train` prompts (the last one full)."""
    return -(-epochs * num_train // batch_size)


def _epochs_steps_in_range(cfg: Config) -> Optional[Refusal]:
    t = cfg.train
    if t.epochs is None or t.steps <= MAX_STEPS:
        return None
    return Refusal("train.epochs", t.epochs,
                   f"makes {t.steps} steps ({t.epochs} x dataset.num_train={cfg.dataset.num_train}"
                   f" / train.batch_size={t.batch_size}), more than train.steps' {MAX_STEPS}")


def _sync_every_needs_a_sampler_copy(cfg: Config) -> Optional[Refusal]:
    # A shared copy is always current: spacing syncs out would silently change nothing.
    r = cfg.rollout
    if r.sync_every == 1 or not rollout_spec(cfg).shares_trainer_weights(cfg):
        return None
    return Refusal("rollout.sync_every", r.sync_every,
                   "has no effect: the sampler shares the trainer's weights (rollout=vanilla on "
                   "the trainer's mesh); use 1, or hardware.split=split / rollout=vllm")


def _sync_every_within_steps(cfg: Config) -> Optional[Refusal]:
    # As MaxText's grpo_trainer: past the last step the sampler keeps the initial weights.
    r, steps = cfg.rollout, cfg.train.steps
    if r.sync_every <= steps:
        return None
    return Refusal("rollout.sync_every", r.sync_every,
                   f"must be in [1, train.steps={steps}]: the sampler would never get trained "
                   "weights")


def _vllm_parallelism(cfg: Config) -> Optional[Refusal]:
    r = cfg.rollout
    for key, size in (("tensor_parallel_size", r.tensor_parallel_size),
                      ("data_parallel_size", r.data_parallel_size)):
        if size == 0:
            return Refusal(f"rollout.{key}", 0, "must be >= 1, or -1 (derived from the rollout "
                           "devices, as Tunix does)")
    return rollout_spec(cfg).parallelism_refusal(cfg)


def _replicas_split_the_rollout_mesh(cfg: Config) -> Optional[Refusal]:
    r, mesh = cfg.rollout, cfg.hardware.rollout_mesh
    if r.replicas == 1:
        return None
    refusal = rollout_spec(cfg).replicas_refusal(cfg)
    if refusal is not None or mesh.fsdp % r.replicas == 0:
        return refusal
    valid = ", ".join(str(d) for d in range(1, mesh.fsdp + 1) if mesh.fsdp % d == 0)
    return Refusal("rollout.replicas", r.replicas,
                   f"must divide hardware.rollout_mesh.fsdp={mesh.fsdp} (each replica takes "
                   f"fsdp/replicas x tp={mesh.tp} of the {mesh.fsdp * mesh.tp} rollout "
                   f"devices): one of {valid}")


def _replicas_need_an_accelerator(cfg: Config) -> Optional[Refusal]:
    # JAX stages a copy into replicated layouts through the host, which Tunix's sync_weights
    # forbids on the CPU (transfer_guard disallow_explicit): measured, the first weight sync
    # into 2 emulated replicas fails after the first step.
    r, h = cfg.rollout, cfg.hardware
    if r.replicas == 1 or (h.platform != "cpu" and not h.emulate):
        return None
    return Refusal("rollout.replicas", r.replicas,
                   "needs a TPU or GPU: on the CPU (hardware=cpu or hardware.emulate=true) Tunix's "
                   "weight sync refuses the host-staged copy into replicated samplers; use 1 there")


def _split_fractions(cfg: Config) -> Optional[Refusal]:
    h = cfg.hardware
    if h.split != "split" or h.trainer_fraction + h.sampler_fraction <= 1.0 + 1e-9:
        return None
    return Refusal("hardware.sampler_fraction", h.sampler_fraction,
                   "trainer_fraction + sampler_fraction must be <= 1")


def lora_projections(targets: str, family: str) -> list[str]:
    """The projections of model.family that `targets` picks (qwix: re.fullmatch on the path)."""
    return [p for p in get_family(family).lora_projections
            if re.fullmatch(targets, f"layers/0/{p}")]


def _lora_targets(cfg: Config) -> Optional[Refusal]:
    lora = cfg.model.lora
    if not lora.rank:
        return None
    try:
        if lora_projections(lora.targets, cfg.model.family):
            return None
    except re.error as exc:
        return Refusal("model.lora.targets", lora.targets, f"is not a regex ({exc})")
    names = get_family(cfg.model.family).lora_projections
    return Refusal("model.lora.targets", lora.targets,
                   f"matches no projection of model.family={cfg.model.family}; module paths "
                   f"are layers/<i>/{{{','.join(names)}}}, e.g. "
                   f"'.*{names[0].split('/')[1]}|.*{names[-1].split('/')[1]}'")


def _lora_rollout(cfg: Config) -> Optional[Refusal]:
    return rollout_spec(cfg).lora_refusal(cfg) if cfg.model.lora.rank else None


# In order: the first refusal is the one reported.
RULES: tuple[Rule, ...] = (
    Rule("algo_imports", _algo_imports),
    Rule("epsilon_high_at_least_epsilon", _epsilon_high),
    Rule("rollout_correction_bounds", _rollout_correction),
    Rule("loss_knobs_act", _loss_knobs_act),
    Rule("profile_steps_pair", _profile_steps),
    Rule("mini_batch_divides_batch", _mini_divides_batch),
    Rule("micro_batch_divides_mini_batch", _micro_divides_mini),
    Rule("rollout_batch_set_once", _rollout_batch_set_once),
    Rule("vllm_parallelism_tiles_the_rollout_mesh", _vllm_parallelism),
    Rule("rollout_micro_batch_fits_train_batches", _rollout_micro_batch),
    Rule("kv_cache_holds_prompt_and_completion", _kv_cache),
    Rule("eval_samples_within_eval_set", _eval_samples),
    Rule("train_set_fills_a_batch", _train_set_fills_a_batch),
    Rule("operators_subset", _operators),
    Rule("terms_ordered", _ordered_from_one("terms")),
    Rule("answer_regex_for_regex_extractor", _answer_regex),
    Rule("answer_regex_compiles", _answer_regex_compiles),
    Rule("tracker_names_within_mlflow_limits", _tracker_names),
    Rule("generated_dataset_reads_no_file", _generated_dataset_reads_no_file),
    Rule("digits_ordered", _ordered_from_one("digits")),
    Rule("meshes_fill_devices", _meshes_fill_devices),
    Rule("split_fractions_fit", _split_fractions),
    Rule("replicas_split_the_rollout_mesh", _replicas_split_the_rollout_mesh),
    Rule("replicas_need_an_accelerator", _replicas_need_an_accelerator),
    Rule("epochs_steps_in_range", _epochs_steps_in_range),
    Rule("sync_every_needs_a_sampler_copy", _sync_every_needs_a_sampler_copy),
    Rule("sync_every_within_steps", _sync_every_within_steps),
    Rule("lora_targets_match_a_projection", _lora_targets),
    Rule("lora_samples_with_vanilla_rollout", _lora_rollout),
)

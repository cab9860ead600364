"""The engine: data, tokenizer, models, Tunix cluster and learner, built from a Config.

Everything in rlexp that imports Tunix lives in this subpackage; the rest of rlexp sees the
typed `Engine` protocol (protocol). `build()` refuses only what needs the built tokenizer
(prompt lengths) or the installed Tunix (BUILD_CHECKS); pre-flight checked every other input.

Modules: learner (the Tunix subclasses, one global step), rollout (a backend per rollout engine),
algo_registry (rlexp's losses plugged into Tunix), tunix_adapter (optimizer, cluster),
lr_schedule (the learning-rate schedule as optimizer state: one program for any rate or length),
tunix_models, cohere (Aya Expanse: Tunix has none), lora, warm_start, tunix_names and
tunix_patches (the private names and patches relied on), checkpoint_store, weights, export,
probes (host-side step metrics), profile (JAX traces).

Layer: engine. May import rlexp.planning, rlexp.inputs, rlexp.data, rlexp.tracking (only to
resolve an MLflow run id for init_from and export), rlexp.config, rlexp.algo, rlexp.base.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from rlexp.base import runtime
from rlexp.base.errors import UserError
from rlexp.config.schema import Config
from rlexp.data import PromptTemplate, Splits, build_splits, load_problems, rewards
from rlexp.data.lengths import check_prompt_lengths
from rlexp.engine import lora, tunix_models as engine_models, tunix_names, warm_start
from rlexp.engine.checkpoint_store import EngineCheckpoints
from rlexp.engine.export import init_from
from rlexp.engine.probes import StepProbe
from rlexp.engine.protocol import CheckpointStore, Engine
from rlexp.engine.tunix_patches import dedicated_pad, use_training_remat
from rlexp.engine.weights import params
from rlexp.inputs import model_files as models
from rlexp.planning.hardware import role_meshes, to_host

if TYPE_CHECKING:
    from rlexp.planning.plan import Plan

# Imported inside functions, on purpose: jax (1.4 s) and the engine modules that import Tunix's
# trainers (tunix_adapter, algo_registry: 3.5 s) are imported where a run builds:
# pre-flight imports this package (export's checkpoint lookup) and must not pay for them.

__all__ = ["CheckpointStore", "Engine", "TunixEngine", "build", "eval_key", "rollout_key"]

log = logging.getLogger(__name__)


@dataclass
class TunixEngine:
    """The Engine protocol (its fields documented there) over Tunix's RLCluster + GRPOLearner."""

    cfg: Config
    # Tunix TokenizerAdapter around the char or HF tokenizer.
    tokenizer: Any
    splits: Splits
    terms: list
    cluster: Any
    learner: Any
    probe: Any
    step_runner: Any
    # The rollout backend (rlexp.engine.rollout): its keys, fresh per sampler call, derive
    # from the key the loop passes.
    rollout: Any
    schedule: Any
    updates_per_step: int
    start_step: int = 0
    info: dict[str, Any] = field(default_factory=dict)
    # Called after every global step (model.lora: rlexp.engine.lora.BaseLink), or None.
    after_step: Any = None

    def train_step(self, batch: dict[str, Any], key: Any,
                   ahead: Sequence[tuple[dict[str, Any], Any]] = ()) -> dict[str, float]:
        self.rollout.keys.reset(key)
        self.probe.reset()
        runner = self.step_runner
        runner(batch, self.start_step + runner.calls + 1, key, ahead)
        if self.after_step is not None:
            self.after_step()
        # host seconds: sampler calls (incl. their device wait), rollout + rewards +
        # advantages + log-probs, and the one metrics fetch (waits for the last update)
        out = {**self.probe.metrics(), "time/rollout_s": self.probe.rollout_s,
               "time/prepare_s": self.probe.prepare_s, "time/fetch_s": self.probe.fetch_s}
        if runner.samples_behind:  # updates between the batch's sampling weights and the trainer's
            out["rollout/staleness"] = float(runner.staleness)
        if runner.ahead_steps:
            out["time/sampler_s"] = runner.sampled_s
        return out

    def rollouts(self) -> list[dict[str, Any]]:
        return self.probe.rows()

    def generate(self, prompts: list[str], key: Any, greedy: bool) -> list[str]:
        """With the EVAL rollout config, chunked as training's calls (reusing their program)."""
        from rlexp.engine.tunix_adapter import Mode

        self.step_runner.sync_for_eval()
        rc = self.cluster.cluster_config.rollout_config[Mode.EVAL]
        self.rollout.keys.reset(key)
        for name, value in self.rollout.eval_sampling(greedy).items():
            setattr(rc, name, value)
        chunk = self.step_runner.rollout_rows
        padded = list(prompts) + [prompts[-1]] * (-len(prompts) % chunk)
        out = self.cluster.generate(padded, mode=Mode.EVAL, micro_batch_size=chunk)
        return list(out.text[: len(prompts)])

    @property
    def rollout_batch(self) -> int:
        return self.cfg.train.batch_size * self.cfg.algo.num_generations

    def policy_state(self) -> dict[str, Any]:
        # to_host may be a collective: every process of the run calls this, in the same order
        return {k: to_host(v) for k, v in params(self.cluster.actor_trainer.model).items()}

    def checkpoint_store(self, directory: str, keep: int) -> CheckpointStore:
        return EngineCheckpoints(self, directory, keep)


def rollout_key(seed: int, step: int) -> Any:
    """Step `step`'s sampling key: fresh every step (Tunix 0.1.7 reuses one), pure."""
    import jax

    return jax.random.fold_in(jax.random.PRNGKey(seed), step)


def eval_key(seed: int) -> Any:
    """Every evaluation's key, the same: before/after comparisons use common random numbers."""
    return rollout_key(seed, 2**31 - 1)


def use_compilation_cache(cfg: Config) -> None:
    """JAX's persistent compilation cache under <run.cache_dir>/jax, thresholds at zero: the tiny
    model's programs compile in well under JAX's default 1 s minimum, yet a run compiles dozens
    of them (prefill, decode per shape, log-probs, the update, the warm start)."""
    if not cfg.run.compilation_cache or os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return
    import jax

    path = Path(cfg.run.cache_dir).expanduser().resolve() / "jax"
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


# What build() itself refuses, by name (README.md's rule table; the module docstring says why).
BUILD_CHECKS = ("prompt_lengths", "tunix_version")


@functools.cache
def _check_installed_tunix() -> None:
    """One line when the installed Tunix lacks a private name the engine uses; once a process."""

    problems = tunix_names.problems()
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise UserError(f"google-tunix {tunix_names.installed_version()} is not the version "
                        f"rlexp was tested with: {problems[0]}{more}; install "
                        f"google-tunix=={tunix_names.TESTED_VERSION}")


def build(cfg: Config, plan: "Plan", run_dir: Path) -> TunixEngine:
    """Everything the loop needs. UserError (one line, naming the key) for bad input."""
    models.resolve_path(cfg.model, cfg.run.cache_dir)
    models.model_dir(cfg.model)  # path errors first: cheapest to report
    raw_tok = models.build_tokenizer(cfg.model)
    chat = raw_tok if cfg.model.chat_template and cfg.model.tokenizer == "hf" else None
    raw = load_problems(cfg.dataset, cfg.run.cache_dir)
    terms = rewards.for_run(cfg, probed=False)  # pre-flight probed them (launch.checks)

    use_compilation_cache(cfg)  # user input checked; before the first compile

    with runtime.loading():  # JAX, Flax, Tunix: most of the objects a job's process holds
        from tunix.generate.tokenizer_adapter import TokenizerAdapter

        from rlexp.engine import learner as learner_lib, tunix_adapter
        from rlexp.engine.rollout import rollout_backend

    _check_installed_tunix()
    tok = TokenizerAdapter(raw_tok)
    # One position is left for the BOS token the sampler prepends.
    terms = rewards.with_token_counter(terms, lambda text: len(tok.encode(text)))
    splits = build_splits(raw, PromptTemplate.from_config(cfg.dataset), tok.encode, tok.decode,
                          cfg.rollout.max_prompt_length - 1, chat)
    # Prompts the sampler would cut, counted before anything compiles or is tracked (+1: the
    # BOS position): more than dataset.max_truncated_fraction is a UserError, fewer one line.
    cut = check_prompt_lengths([n + 1 for n in splits.prompt_lengths],
                               cfg.rollout.max_prompt_length, cfg.dataset.max_truncated_fraction)
    if cut:
        print(f"rlexp: warning: {cut}", file=sys.stderr, flush=True)
    # A pad id that no prompt contains (Tunix masks every prompt token equal to pad_id).
    dedicated_pad(raw_tok, (tok.encode(e.prompt) for e in [*splits.train, *splits.eval]))
    info: dict[str, Any] = {"data/train": len(splits.train), "data/eval": len(splits.eval),
                            "data/skipped": splits.skipped, "data/truncated": splits.truncated}
    if splits.skipped:
        log.warning("dataset: skipped %d malformed rows or rows without an answer", splits.skipped)

    meshes = role_meshes(cfg.hardware, replicas=cfg.rollout.replicas)
    # Process-wide patches: set before anything traces the model (the warm start does), and
    # reset by every build so a sweep's previous job in this process leaves nothing behind.
    use_training_remat(cfg.model.family, cfg.train.remat)
    # A cached warm start's weights replace the random ones: read first, then build abstract.
    cached = None if cfg.run.init_from else warm_start.cached_params(cfg)
    model = engine_models.build_model(cfg.model, meshes["trainer"], cfg.train.seed,
                                      abstract=cached is not None)
    if cfg.run.init_from:  # a fork starts from its origin's weights: no warm start
        info.update(init_from(cfg, model))
    else:
        info.update(warm_start.warm_start(cfg, model, tok, splits.train, cached))
    if cfg.model.lora.rank:  # adapters train; the frozen base is the reference (no copy)
        base, model = lora.apply(cfg.model, model, meshes["trainer"], cfg.train.seed)
        reference = base if cfg.algo.uses_reference else None
        after_step = lora.BaseLink(model, base)
    else:
        after_step = None
        reference = engine_models.clone(model, cfg.model.dtype) if cfg.algo.uses_reference else None
    probe = StepProbe(cfg.algo.num_generations, cfg.rollout.max_completion_length)
    rollout = rollout_backend(cfg)
    cluster = tunix_adapter.make_cluster(cfg, model, reference, raw_tok, meshes, probe, rollout)
    reward_fns = rewards.tunix_reward_fns(terms, probe.record_reward)
    learner = learner_lib.Learner(cfg, cluster, reward_fns)
    info.update(lora.counts(cluster.actor_trainer.model))  # params/total, params/trainable
    runner = learner_lib.StepRunner(learner, cfg.train.batch_size, cfg.rollout.sync_every,
                                    rollout, cfg.rollout.off_policy_steps)
    return TunixEngine(cfg=cfg, tokenizer=tok, splits=splits, terms=terms, cluster=cluster,
                       learner=learner, probe=probe, step_runner=runner, rollout=rollout,
                       schedule=tunix_adapter.host_lr_schedule(cfg),
                       updates_per_step=tunix_adapter.updates_per_step(cfg), info=info,
                       after_step=after_step)

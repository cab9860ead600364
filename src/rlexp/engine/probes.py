"""What one training step did, gathered where Tunix computes it, synchronously.

Tunix logs its own metrics one step late (it overlaps I/O with the next step) and through a
global jax.monitoring listener (DESIGN trap 4). rlexp instead records, during the step:
reward values (our reward functions), loss/grad-norm/aux of every update (the actor
trainer's post-step hook), and rollout timing and token counts (the learner's rollout
call), so step k's metrics are complete when step k returns.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import numpy as np


class StepProbe:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        # reward name -> weighted values of every completion this step
        self.rewards: dict[str, list[float]] = defaultdict(list)
        # metric name -> one value per policy update this step
        self.updates: dict[str, list[float]] = defaultdict(list)
        self.completion_tokens = 0
        self.completions = 0
        self.rollout_s = 0.0
        self.prepare_s = 0.0
        self.texts: list[str] = []

    def record_reward(self, name: str, values: list[float]) -> None:
        self.rewards[name].extend(values)

    def attach(self, learner: Any, cluster: Any, aux_keys: tuple[str, ...]) -> None:
        """Wrap the three Tunix calls whose results a step's metrics need (instance-level)."""
        probe = self
        trainer = cluster.actor_trainer
        post = trainer._post_process_train_step

        def post_process(aux: Any) -> None:
            post(aux)
            buf = trainer._buffered_train_metrics
            probe.updates["loss"].append(buf.losses[-1])
            probe.updates["grad_norm"].append(buf.additional_metrics["grad_norm"][0][-1])
            for k in aux_keys:
                probe.updates[k].append(aux[k])

        trainer._post_process_train_step = post_process
        # Tunix would log aux["pg_clipfrac"], which our loss does not produce.
        trainer.with_rl_metrics_to_log({})

        prepare = learner._generate_and_compute_advantage

        def timed_prepare(*args: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            out = prepare(*args, **kw)
            probe.prepare_s += time.perf_counter() - t
            mask = np.asarray(out.completion_mask)
            probe.completion_tokens += int(mask.sum())
            probe.completions += mask.shape[0]
            return out

        learner._generate_and_compute_advantage = timed_prepare

        generate = cluster.generate

        def timed_generate(*args: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            out = generate(*args, **kw)
            probe.rollout_s += time.perf_counter() - t
            probe.texts.extend(out.text)
            return out

        cluster.generate = timed_generate

    def metrics(self) -> dict[str, float]:
        """Step metrics with rlexp's stable names (per-update values averaged)."""
        out: dict[str, float] = {}
        if self.rewards:
            per_fn = {k: float(np.mean(v)) for k, v in self.rewards.items()}
            out["train/reward_mean"] = float(np.sum(list(per_fn.values())))
            out.update({f"train/reward/{k}": v for k, v in per_fn.items()})
        names = {"loss": "train/loss", "kl": "train/kl", "clip_fraction": "train/clip_fraction",
                 "grad_norm": "train/grad_norm", "pg_loss": "train/pg_loss",
                 "ratio_mean": "train/ratio_mean", "ratio_max": "train/ratio_max",
                 "ratio_min": "train/ratio_min"}
        for k, v in self.updates.items():
            vals = np.asarray([np.asarray(x, dtype=np.float64) for x in v])
            agg = vals.max() if k == "ratio_max" else vals.min() if k == "ratio_min" else vals.mean()
            out[names.get(k, f"train/{k}")] = float(agg)
        if self.updates:
            out["train/updates"] = float(len(next(iter(self.updates.values()))))
        if self.completions:
            out["train/completion_length"] = self.completion_tokens / self.completions
        return out

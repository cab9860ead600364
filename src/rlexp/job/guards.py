"""Guards: settings that silently do nothing (found up front) and values that went non-finite.
Tunix 0.1.7 computes the old log-probs only when num_iterations > 1 (grpo_learner.py; each
mini-batch is rolled out with the current weights): on-policy the ratio is exactly 1, nothing
is clipped, and GRPO and GSPO give bit-identical updates. The warning is for a user who *chose*
such a knob (command line, sweep, or an experiment file or group choice that sets a value other
than the default's); printed by pre-flight (rlexp.launch.preflight.warn_noop)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from rlexp.config.schema import Config

# Keys whose values cannot matter in an on-policy run (a sweep over them is wasted).
NOOP_KEYS = ("algo.epsilon", "algo.epsilon_high", "algo.name", "algo.ratio_level",
             # at ratio 1 SAPO's gate has GRPO's gradient and VESPO's weight phi(1) is 1
             "algo.sapo_temperature_pos", "algo.sapo_temperature_neg", "algo.vespo_k_pos",
             "algo.vespo_lambda_pos", "algo.vespo_k_neg", "algo.vespo_lambda_neg")
NOOP_GROUPS = {"algo": "algo.name"}  # group choices that set algo.name (`algo=gspo`)
# Algorithm knobs that act with num_iterations=1 too (they shape the advantages, the mask or
# the aggregation, not the ratio): Dr.GRPO's and DAPO's on-policy parts. An algo choice that
# changes one of them (algo=dr_grpo, algo=dapo) is not a no-op; algo=gspo is (beta aside).
ON_POLICY_KEYS = ("algo.scale_rewards", "algo.loss_agg", "algo.mask_truncated",
                  "algo.dynamic_sampling", "algo.overlong_buffer", "algo.advantage",
                  "algo.entropy_coef", "algo.top_entropy_quantile")

# The guards by name (README.md's rule table): a warning at start and a stop mid-run.
GUARDS = ("on_policy_noop", "nonfinite")


def _value(cfg: Config, key: str) -> Any:
    return getattr(cfg.algo, key.split(".", 1)[1])


def on_policy_signature(cfg: Config) -> tuple:
    """The values of ON_POLICY_KEYS: two jobs that share it train alike on-policy."""
    return tuple(_value(cfg, k) for k in ON_POLICY_KEYS)


# Step metrics that stop a run when NaN/Inf (the last good checkpoint is kept). A NaN grad
# norm or KL precedes a NaN loss by a step or more (an inf learning rate gives NaN weights
# while the loss of that step is still finite); reward components are under train/reward/.
WATCHED = ("train/loss", "train/reward_mean", "train/grad_norm", "train/kl")
WATCHED_PREFIXES = ("train/reward/",)


def nonfinite(metrics: dict[str, float]) -> list[str]:
    """Watched metrics that are NaN or +-Inf."""
    bad = []
    for key, value in metrics.items():
        if key in WATCHED or key.startswith(WATCHED_PREFIXES):
            try:
                finite = math.isfinite(float(value))
            except (TypeError, ValueError):
                continue
            if not finite:
                bad.append(key)
    return bad


def on_policy_noop(cfg: Config) -> bool:
    """True when the importance ratio is exactly 1, so NOOP_KEYS change nothing."""
    return cfg.algo.num_iterations == 1


def set_noop_keys(overrides: Iterable[str]) -> set[str]:
    """NOOP_KEYS the user set in `overrides` ("algo.epsilon=0.1", "algo=gspo", "+algo.x=")."""
    keys = {override.lstrip("+~").split("=", 1)[0].strip() for override in overrides}
    return {NOOP_GROUPS.get(key, key) for key in keys} & set(NOOP_KEYS)


def noop_message(cfg: Config, keys: Iterable[str]) -> str:
    keys = list(keys)
    return (f"algo.num_iterations={cfg.algo.num_iterations}: updates are on-policy, the importance "
            f"ratio is exactly 1, so {', '.join(keys)} {'changes' if len(keys) == 1 else 'change'} "
            "nothing (set algo.num_iterations>=2 for clipping and GSPO to act)")


def noop_warning(jobs: list[Config], overrides: Iterable[str], swept: dict[str, list[str]],
                 multirun: bool) -> str | None:
    """The one warning line for a command, or None: the user set (or swept) a NOOP_KEY and
    every job is on-policy. A sweep warns only for keys it varies."""
    if not jobs or not all(on_policy_noop(job) for job in jobs):
        return None
    if multirun:
        same = len({on_policy_signature(job) for job in jobs}) == 1
        keys = [k for k in NOOP_KEYS if len(swept.get(k, ())) > 1 or
                k == "algo.name" and len(swept.get("algo", ())) > 1 and same]
        if not keys:
            return None
        return f"this sweep varies {', '.join(keys)} but every job is on-policy: " + \
            noop_message(jobs[0], keys)
    # named on the command line, or chosen (see the module docstring)
    named, default = set_noop_keys(overrides), Config()
    keys = [k for k in NOOP_KEYS if k in named or _value(jobs[0], k) != _value(default, k)]
    if "algo.name" in keys and on_policy_signature(jobs[0]) != on_policy_signature(default):
        keys.remove("algo.name")  # e.g. algo=dr_grpo: its scale_rewards/loss_agg act on-policy
    if not keys or keys == ["algo.name"] and jobs[0].algo.name == "grpo":
        return None
    return noop_message(jobs[0], [f"{k}={_value(jobs[0], k)}" for k in keys])

"""The algorithm's config section (algo.*), each field's type, default, valid values and meaning
in one place: rlexp.config.schema types the `algo` node with it and the loss reads it
(`for_loss` fills its nulls). JAX-free."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from rlexp.algo import algorithm
from rlexp.algo.choices import (ADVANTAGES, KL_ESTIMATORS, LOSS_AGGREGATIONS, LOSSES,
                                RATIO_LEVELS, REWARD_SCALES, ROLLOUT_CORRECTIONS)
from rlexp.base.knobs import knob


@dataclass
class AlgoConfig:
    # Algorithm of rlexp.algo.variants, or a dotted path to a user's Algorithm.
    name: str = knob("grpo", choices=algorithm.algorithms,
                     dotted="a dotted path to an rlexp.algo.algorithm.Algorithm")
    # Weight of the KL penalty to the reference model (0 drops the reference model).
    beta: float = knob(0.04, range="[0, inf)")
    # Lower clip range of the importance ratio: ratio >= 1 - epsilon (1: no lower clip, CISPO).
    epsilon: float = knob(0.2, range="(0, 1]")
    # Upper clip: ratio <= 1 + epsilon_high (DAPO clip-higher); None = epsilon; CISPO's IS cap.
    epsilon_high: Optional[float] = knob(None, range="(0, inf)")
    # Completions sampled per prompt (the group); 1024 is past any recipe (DeepSeek-R1: 16).
    num_generations: int = knob(4, range="[2, 1024]")
    # Policy updates per rollout batch (mu; GRPO recipes 1-4); 1 = on-policy, ratio exactly 1.
    num_iterations: int = knob(1, range="[1, 64]")
    # KL estimator: k1 (log-ratio) | k2 (squared log-ratio / 2) | k3 (Schulman's unbiased).
    kl_estimator: str = knob("k3", choices=KL_ESTIMATORS)
    # Loss aggregation (rlexp.algo.losses; TRL grpo, dapo, dr_grpo are three of them).
    loss_agg: str = knob("sequence-mean-token-mean", choices=LOSS_AGGREGATIONS)
    # Importance ratio per token (GRPO) or sequence (GSPO; TRL importance_sampling_level);
    # sequence_token: the GSPO paper's eq. 13 gradient form (rlexp.algo.losses).
    ratio_level: Optional[str] = knob(None, choices=RATIO_LEVELS,
                                      null="null (the algorithm's own)")
    # Advantage std scaling (TRL scale_rewards): group | batch (one Tunix call) | none (Dr.GRPO).
    scale_rewards: str = knob("group", choices=REWARD_SCALES)
    # Drop completions cut at the budget (no EOS) from the loss (TRL mask_truncated_completions).
    mask_truncated: bool = False
    # Drop groups with all-equal rewards from the loss (DAPO dynamic sampling, no re-sampling).
    dynamic_sampling: bool = False
    # DAPO overlong: budget share (last tokens) ramping to -overlong_penalty (paper: 0.2); 0 = off.
    overlong_buffer: float = knob(0.0, range="[0, 1]")
    # DAPO overlong shaping: weight of the penalty (logged as train/reward/overlong).
    overlong_penalty: float = knob(1.0, range="[0, inf)")
    # Policy-loss family (rlexp.algo.losses; TRL loss_type / verl loss_mode).
    loss: str = knob("ppo_clip", choices=LOSSES)
    # Advantage estimator (rlexp.algo.advantages; verl adv_estimator).
    advantage: str = knob("grpo", choices=ADVANTAGES)
    # SAPO gate temperature for tokens with A > 0 / A <= 0 (TRL sapo_temperature_pos/_neg).
    sapo_temperature_pos: float = knob(1.0, range="(0, inf)")
    sapo_temperature_neg: float = knob(1.05, range="(0, inf)")
    # VESPO gamma weighting exponents and rates for A >= 0 / A < 0 (TRL vespo_*).
    vespo_k_pos: float = knob(2.0, range="[0, inf)")
    vespo_lambda_pos: float = knob(3.0, range="[0, inf)")
    vespo_k_neg: float = knob(3.0, range="[0, inf)")
    vespo_lambda_neg: float = knob(2.0, range="[0, inf)")
    # Clip-Cov: share of tokens with a cut gradient; covariance window (verl clip_cov_ratio/lb/ub).
    clip_cov_ratio: float = knob(2e-4, range="(0, 1]")
    clip_cov_lb: float = knob(1.0, range="(-inf, inf)")
    clip_cov_ub: float = knob(5.0, range="(-inf, inf)")
    # KL-Cov: share of tokens given the |log r| penalty, its weight (verl kl_cov_ratio/ppo_kl_coef;
    # 0.1 is verl 0.9.1's config default, 1.0 only its code's fallback).
    kl_cov_ratio: float = knob(2e-4, range="(0, 1]")
    ppo_kl_coef: float = knob(0.1, range="[0, inf)")
    # DRO: weight of the (log r)^2 / 2 penalty (verl policy_loss.dro_beta, which must be > 0).
    dro_beta: float = knob(0.1, range="(0, inf)")
    # Upper cap of the unclipped ratio, two-sided clip (TRL delta, INTELLECT-2 arXiv:2505.07291;
    # ppo_clip and luspo); None = off. At or below 1 it would stop every A > 0 gradient at r = 1.
    delta: Optional[float] = knob(None, range="(1, inf)")
    # Drop A < 0 rows whose mean log(pi_sampler / pi) exceeds it from the policy term (TRL
    # off_policy_mask_threshold, DeepSeek-V3.2 arXiv:2512.02556 eq. 9); None = off.
    off_policy_mask_threshold: Optional[float] = knob(None, range="(0, inf)")
    # KL term x the importance ratio (TRL use_bias_correction_kl, DeepSeek-V3.2). TRL 1.16's
    # default is true; false here keeps the GRPO paper's, Tunix's and verl's KL gradient.
    use_bias_correction_kl: bool = False
    # Entropy bonus: loss - coef x mean token entropy (TRL entropy_coef); 0 = off, < 0 = penalty.
    entropy_coef: float = knob(0.0, range="(-inf, inf)")
    # Policy term on the top-entropy share of tokens (arXiv:2506.01939: 0.2); 1 = every token,
    # 0 none (refused: no policy gradient).
    top_entropy_quantile: float = knob(1.0, range="(0, 1]")
    # Trainer/sampler mismatch correction (TRL vllm_importance_sampling_mode), rollout_correction.
    rollout_correction: str = knob("none", choices=ROLLOUT_CORRECTIONS)
    # Bounds of pi_old / pi_sampler: clipped (*_truncate) or 0 outside (*_mask); None = unbounded.

    rollout_correction_clip_min: Optional[float] = knob(None, range="[0, inf)")
    rollout_correction_clip_max: Optional[float] = knob(3.0, range="(0, inf)")

    @property
    def uses_reference(self) -> bool:
        """A KL penalty needs the reference model; beta = 0 builds and plans none."""
        return self.beta > 0

    def for_loss(self) -> AlgoConfig:
        """As the loss reads them: null ratio_level = the algorithm's, epsilon_high = epsilon."""
        level = algorithm.get(self.name).ratio_level if self.ratio_level is None else \
            self.ratio_level
        high = self.epsilon if self.epsilon_high is None else self.epsilon_high
        return dataclasses.replace(self, ratio_level=level, epsilon_high=high)

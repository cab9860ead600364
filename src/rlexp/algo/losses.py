"""Clipped policy-gradient losses of GRPO (token-level ratio) and GSPO (sequence-level ratio).

GRPO (Shao et al. 2024): r_t = pi(y_t)/pi_old(y_t). GSPO (arXiv:2507.18071): one ratio per row,
s = exp(mean_t log r_t), on every token of the row, differentiated through the mean (TRL 1.16
importance_sampling_level="sequence"): a per-token weight w_t (entropy mask, token-level rollout
correction) then spreads the row's gradient sum_t w_t ds over all its tokens. ratio_level
"sequence_token" is the paper's GSPO-token form (its eq. 13, Tunix's "gspo-token"),
sg(s) pi(y_t) / sg(pi(y_t)): the same value, each token its own gradient, so w_t keeps it on the
weighted tokens; the two agree when every token of a row weighs the same. loss_t = max(-A r_t,
-A clip(r_t, 1 - eps_low, 1 + eps_high)) over the mask, plus beta * KL(pi || pi_ref); `delta`
caps the unclipped r_t from above too (TRL delta, INTELLECT-2's two-sided clip).

DAPO (arXiv:2503.14476) and Dr.GRPO (arXiv:2503.20783) are settings of the same loss. Dynamic
sampling drops groups whose advantages are all 0 from the mask; `mask_truncated` drops
completions that hit the budget without EOS (TRL's mask_truncated_completions).

Divisors (checked against TRL 1.16's GRPOTrainer._compute_loss in tests/test_trl_oracle.py;
the loss families below against it and verl 0.9.1 core_algos.py in tests/test_verl_oracle.py):
  token-mean                 the kept tokens (DAPO; TRL "dapo")
  sequence-mean-token-mean   the kept rows: rows with at least one kept token (GRPO, GSPO)
  sequence-mean-token-sum    the kept rows
  sequence-mean-token-scale  all rows x the completion budget (rollout.max_completion_length),
                             whatever the masks (Dr.GRPO; TRL "dr_grpo")
With masked rows the GRPO/GSPO mean is over the rows left (6 of 8: 8/6 of TRL's "grpo"). Under
accumulation the divisors are the window's (`Divisors`): the update equals the mini-batch's.

Loss families (algo.loss; per_token_loss):
  ppo_clip  the clipped surrogate above (GRPO, GSPO, DAPO, Dr.GRPO)
  cispo     -sg(clip(r, 1 - eps, 1 + eps_high)) A log pi: the IS weight is clipped and
            stop-gradient, every token keeps a gradient (MiniMax-M1, arXiv:2506.13585)
  sapo      -A (4 / tau) sigmoid(tau (r - 1)), tau = sapo_temperature_pos if A > 0 else
            _neg: a soft gate instead of a hard clip (arXiv:2511.20347)
  gmpo      -A exp(mean_t clip_sign(log r_t)) per sequence: the geometric mean of the token
            ratios, each log-ratio clipped to [-eps, eps_high] on the side A pushes
            (arXiv:2507.20673; verl geo_mean)
  luspo     the clipped surrogate, meant with sequence ratios and sequence-mean-token-sum
            (length-unbiased: every token of a sequence weighs the same; TRL loss_type=luspo)
  vespo     -sg(phi(w)) A log pi with phi(w) = exp(lambda) w^k exp(-lambda w), w the
            sequence IS ratio exp(sum_t log r_t), (k, lambda) by the sign of A (TRL vespo)
  clip_cov  the clipped surrogate with the gradient of a few high-covariance tokens
            removed: tokens not clipped whose cov = (A - mean A)(log pi - mean log pi) lies in
            (clip_cov_lb, clip_cov_ub), at most max(1, clip_cov_ratio x tokens), the largest
            first (verl picks among them at random) (Cui et al. 2025, arXiv:2505.22617)
  kl_cov    -A r plus ppo_kl_coef |log r| on the top max(1, kl_cov_ratio x tokens) tokens by
            that covariance, no clipping (same paper)
  dro       -(A log pi - dro_beta / 2 (log r)^2): REINFORCE with a quadratic proximal penalty
            instead of a clip (verl 0.9.1 loss_mode "dro")
Clip-Cov and KL-Cov pick exactly k = max(1, int(ratio x tokens)) tokens (Clip-Cov: at most its
candidates), k in float64 as verl's Python computes it; among equal covariances the earlier
token (row-major) first.
Rollout correction weights (rlexp.algo.rollout_correction) multiply the per-token policy loss
after the entropy mask, before aggregation, not the KL term (TRL 1.16's _compute_loss).
TRL 1.16's two DeepSeek-V3.2 options (arXiv:2512.02556): `off_policy_mask_threshold` drops
from the policy term rows with A < 0 whose mean log(pi_sampler / pi) exceeds it (pi_old when
there are no sampler log-probs); `use_bias_correction_kl` multiplies the KL term by the ratio.
Entropy (TRL's names): `top_entropy_quantile` < 1 keeps in the policy term only tokens whose
entropy is at least the (1 - q) quantile of the batch's (Wang et al. 2025,
arXiv:2506.01939); `entropy_coef` subtracts coef x the mean entropy of those tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from rlexp.algo.choices import LOSS_AGGREGATIONS, LOSSES, RATIO_LEVELS
from rlexp.algo.kl import kl_estimate
from rlexp.algo.settings import AlgoConfig

# Log-ratios are clipped before exp() so one wild token cannot overflow (as Tunix does).
MAX_LOG_RATIO = 20.0

# The settings a sweep varies that change no shape or branch of the loss: the update reads them
# from an array beside the batch (engine/algo_registry.py), so runs differing only in them share
# one compiled update and its persistent-cache entry. Whether one is None (off) or 0 (beta,
# entropy_coef), the choices, and the Clip-/KL-Cov shares (counted in NumPy) stay compile-time.
RUNTIME_NUMBERS = ("beta", "epsilon", "epsilon_high", "delta", "sapo_temperature_pos",
                   "sapo_temperature_neg", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg",
                   "vespo_lambda_neg", "clip_cov_lb", "clip_cov_ub", "ppo_kl_coef", "dro_beta",
                   "off_policy_mask_threshold", "entropy_coef", "top_entropy_quantile")


def runtime_numbers(s: AlgoConfig) -> np.ndarray:
    """s's RUNTIME_NUMBERS as float32, in that order (NaN for None)."""
    return np.asarray([np.nan if getattr(s, k) is None else getattr(s, k)
                       for k in RUNTIME_NUMBERS], np.float32)


def _numbers(s: AlgoConfig, values: jnp.ndarray | None) -> dict:
    """RUNTIME_NUMBERS by name: `values` ([K], runtime_numbers' order) or, None, s's own."""
    if values is None:
        return {k: getattr(s, k) for k in RUNTIME_NUMBERS}
    return {k: values[i] for i, k in enumerate(RUNTIME_NUMBERS)}


def masked_mean(x: jnp.ndarray, mask: jnp.ndarray) -> jnp.ndarray:
    m = mask.astype(jnp.float32)
    return (x * m).sum() / jnp.maximum(m.sum(), 1.0)


@dataclass(frozen=True)
class Divisors:
    """What the mask-dependent aggregations divide by, when not this batch's own counts."""
    # Kept tokens (token-mean); under gradient accumulation the window's / its micro-batches.
    tokens: jnp.ndarray
    # Kept rows (the sequence means); likewise.
    rows: jnp.ndarray


def kept_counts(mask: jnp.ndarray) -> Divisors:
    """This batch's kept tokens and kept rows (rows with a kept token) of a kept_mask."""
    m = mask.astype(jnp.float32)
    return Divisors(tokens=m.sum(), rows=(m.sum(axis=-1) > 0).sum().astype(jnp.float32))


def aggregate(per_token: jnp.ndarray, mask: jnp.ndarray, mode: str, budget: int | None = None,
              divisors: Divisors | None = None) -> jnp.ndarray:
    """[B, T] values to a scalar over the mask. `budget`: Dr.GRPO's (None = T); `divisors`: None
    = this batch's own, kept_counts(mask)."""
    m = mask.astype(jnp.float32)
    x = per_token.astype(jnp.float32) * m
    d = kept_counts(m) if divisors is None else divisors
    tokens, rows = jnp.maximum(d.tokens, 1.0), jnp.maximum(d.rows, 1.0)
    if mode == "token-mean":
        return x.sum() / tokens
    if mode == "sequence-mean-token-mean":
        return (x.sum(axis=-1) / jnp.maximum(m.sum(axis=-1), 1.0)).sum() / rows
    if mode == "sequence-mean-token-sum":
        return x.sum() / rows
    if mode == "sequence-mean-token-scale":  # Dr.GRPO: a constant, rows x the budget
        return x.sum() / (x.shape[0] * (x.shape[-1] if budget is None else budget))
    raise ValueError(f"unknown loss aggregation {mode!r}; valid: {', '.join(LOSS_AGGREGATIONS)}")


def importance_log_ratio(logp: jnp.ndarray, old_logp: jnp.ndarray, mask: jnp.ndarray,
                         level: str) -> jnp.ndarray:
    """log r_t per token: token-level (GRPO), or the row's mean (GSPO as TRL differentiates it;
    sequence_token: the paper's eq. 13 form), see the module docstring."""
    log_r = jnp.clip(logp - old_logp, -MAX_LOG_RATIO, MAX_LOG_RATIO)
    if level == "token":
        return log_r
    m = mask.astype(jnp.float32)
    seq = ((log_r * m).sum(axis=-1) / jnp.maximum(m.sum(axis=-1), 1.0))[:, None]
    if level == "sequence":
        return jnp.broadcast_to(seq, logp.shape)
    if level == "sequence_token":
        return logp - jax.lax.stop_gradient(logp) + jax.lax.stop_gradient(seq)
    raise ValueError(f"unknown ratio level {level!r}; valid: {', '.join(RATIO_LEVELS)}")


def truncated_rows(completion_ids: jnp.ndarray, mask: jnp.ndarray, eos_id: int,
                   budget: int | None = None) -> jnp.ndarray:
    """[B] True where the completion fills the budget (None = the padded width) and its last
    token is not EOS. Completions are left-aligned: the mask is a prefix of each row."""
    lengths = mask.astype(jnp.int32).sum(axis=-1)
    last = jnp.take_along_axis(completion_ids, jnp.maximum(lengths - 1, 0)[:, None], axis=-1)[:, 0]
    full = lengths >= (completion_ids.shape[-1] if budget is None else budget)
    return full & (last != eos_id)


def kept_mask(mask: jnp.ndarray, advantages: jnp.ndarray, truncated: jnp.ndarray | None,
              s: AlgoConfig) -> jnp.ndarray:
    """The [B, T] mask aggregated over: all-zero-advantage groups and truncated rows zeroed."""
    if not (s.dynamic_sampling or s.mask_truncated):
        return mask
    adv = advantages.astype(jnp.float32)
    adv = adv if adv.ndim == 1 else adv[:, 0]
    keep = jnp.ones(adv.shape, jnp.float32)
    if s.dynamic_sampling:
        varied = (adv.reshape(-1, s.num_generations) != 0).any(axis=-1)
        keep = keep * jnp.repeat(varied, s.num_generations).astype(jnp.float32)
    if s.mask_truncated and truncated is not None:
        keep = keep * (1.0 - truncated.astype(jnp.float32))
    return mask.astype(jnp.float32) * keep[:, None]


def masked_quantile(x: jnp.ndarray, mask: jnp.ndarray, q: float) -> jnp.ndarray:
    """The q-quantile of x over the mask, interpolated linearly between order statistics as
    torch.quantile does (jit-friendly: masked values sort last); 0 for an empty mask."""
    m = mask > 0
    n = m.sum().astype(jnp.int32)
    s = jnp.sort(jnp.where(m, x.astype(jnp.float32), jnp.inf).reshape(-1))
    last = jnp.maximum(n - 1, 0)
    pos = q * last.astype(jnp.float32)
    lo = jnp.floor(pos).astype(jnp.int32)
    hi = jnp.minimum(lo + 1, last)
    a, b = s[lo], s[hi]
    return jnp.where(n > 0, a + (pos - lo) * (b - a), 0.0)


def high_entropy_mask(entropy: jnp.ndarray, mask: jnp.ndarray, keep: float) -> jnp.ndarray:
    """1.0 on kept tokens whose entropy is at least the (1 - keep) quantile of the kept
    tokens' entropies (TRL's get_high_entropy_mask, one process)."""
    e = jax.lax.stop_gradient(entropy.astype(jnp.float32))
    threshold = masked_quantile(e, mask, 1.0 - keep)
    return ((e * mask >= threshold) & (mask > 0)).astype(jnp.float32)


def share_count(share: float, n: jnp.ndarray, most: int) -> jnp.ndarray:
    """max(1, int(share x n)) for a traced count n in [0, most], as verl's Python computes it
    (float64: 0.29 x 100 is 28, float32 makes it 29). The n at which the count steps up are
    found here in NumPy's float64 and searched on the device."""
    counts = np.floor(share * np.arange(most + 1))
    steps = np.searchsorted(counts, np.arange(1, counts[-1] + 1))
    return jnp.maximum(jnp.searchsorted(jnp.asarray(steps, jnp.int32), n, side="right"), 1)


def _top_tokens(score: jnp.ndarray, eligible: jnp.ndarray, k: jnp.ndarray) -> jnp.ndarray:
    """1.0 on exactly min(k, eligible) eligible tokens: the largest scores, ties to the earlier
    token in row-major order (a stable sort; jit-friendly: k may be traced)."""
    flat = jnp.where(eligible, score, -jnp.inf).reshape(-1)
    order = jnp.argsort(-flat, stable=True)
    rank = jnp.zeros(flat.size, jnp.int32).at[order].set(jnp.arange(flat.size, dtype=jnp.int32))
    return ((rank.reshape(score.shape) < k) & eligible).astype(jnp.float32)


def _covariance(adv: jnp.ndarray, logp: jnp.ndarray, mask: jnp.ndarray) -> jnp.ndarray:
    """Per-token (A - mean A)(log pi - mean log pi) over the mask (Cui et al. 2025, eq. 4)."""
    adv = jnp.broadcast_to(adv, logp.shape)
    lp = jax.lax.stop_gradient(logp)
    return (adv - masked_mean(adv, mask)) * (lp - masked_mean(lp, mask))


def per_token_loss(logp: jnp.ndarray, old: jnp.ndarray, adv: jnp.ndarray, mask: jnp.ndarray,
                   s: AlgoConfig, rollout_weights: jnp.ndarray | None = None,
                   numbers: jnp.ndarray | None = None
                   ) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """[B, T] policy-term loss of s.loss, and the ratio and the 0/1 'this token's update was
    clipped' used for the diagnostics. `adv` is [B, 1] or [B, T]. `rollout_weights` is read
    by VESPO only (policy_loss weights the others' result); `numbers`: see policy_loss."""
    x = _numbers(s, numbers)
    ratio = jnp.exp(importance_log_ratio(logp, old, mask, s.ratio_level))
    lo, hi = 1.0 - x["epsilon"], 1.0 + x["epsilon_high"]
    m = mask.astype(jnp.float32)
    if s.loss in ("ppo_clip", "luspo", "clip_cov"):
        capped = ratio if s.delta is None else jnp.minimum(ratio, x["delta"])
        unclipped, clipped = -adv * capped, -adv * jnp.clip(ratio, lo, hi)
        loss, was_clipped = jnp.maximum(unclipped, clipped), (clipped > unclipped)
        if s.loss == "clip_cov":
            cov = _covariance(adv, logp, m)
            eligible = (m > 0) & ~was_clipped & (cov > x["clip_cov_lb"]) & (cov < x["clip_cov_ub"])
            k = share_count(s.clip_cov_ratio, m.sum().astype(jnp.int32), m.size)
            loss = loss * (1.0 - _top_tokens(cov, eligible, k))
        return loss, ratio, was_clipped.astype(jnp.float32)
    if s.loss == "cispo":
        weight = jax.lax.stop_gradient(jnp.clip(ratio, lo, hi))
        return -weight * adv * logp, ratio, ((ratio < lo) | (ratio > hi)).astype(jnp.float32)
    if s.loss == "sapo":
        tau = jnp.where(adv > 0, x["sapo_temperature_pos"], x["sapo_temperature_neg"])
        gate = jax.nn.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau
        return -gate * adv, ratio, jnp.zeros_like(ratio)
    log_r = logp - old
    if s.loss == "gmpo":
        sign = jnp.sign(adv)
        clamped = jnp.clip(log_r, -x["epsilon"], x["epsilon_high"])
        kept = sign * jnp.minimum(sign * log_r, sign * clamped)
        seq_ratio = jnp.exp((kept * m).sum(-1) / jnp.maximum(m.sum(-1), 1.0))
        seq_adv = (adv * m).sum(-1) / jnp.maximum(m.sum(-1), 1.0)
        row = (-seq_adv * seq_ratio)[:, None]
        return jnp.broadcast_to(row, logp.shape), ratio, (log_r != clamped).astype(jnp.float32)
    if s.loss == "vespo":
        seq = (jnp.clip(log_r, -MAX_LOG_RATIO, MAX_LOG_RATIO) * m).sum(-1, keepdims=True)
        if rollout_weights is not None:  # log w = log(pi/pi_old) + log(pi_old/pi_sampler)
            log_is = jnp.clip(jnp.log(rollout_weights.astype(jnp.float32)), jnp.log(1e-8),
                              MAX_LOG_RATIO)
            seq = seq + log_is.sum(-1, keepdims=True)
        log_w = jnp.clip(seq, jnp.log(1e-8), MAX_LOG_RATIO)
        pos = adv >= 0
        k = jnp.where(pos, x["vespo_k_pos"], x["vespo_k_neg"])
        lam = jnp.maximum(jnp.where(pos, x["vespo_lambda_pos"], x["vespo_lambda_neg"]), 1e-4)
        phi = jnp.nan_to_num(jnp.exp(lam + k * log_w - lam * jnp.exp(log_w)), nan=0.0,
                             posinf=0.0, neginf=0.0)
        return -jax.lax.stop_gradient(phi) * adv * logp, ratio, jnp.zeros_like(ratio)
    if s.loss == "kl_cov":
        cov = _covariance(adv, logp, m)
        top = _top_tokens(cov, m > 0, share_count(s.kl_cov_ratio, m.sum().astype(jnp.int32),
                                                  m.size))
        # |log r| with torch's gradient at 0 (0, where jnp.abs has 1): on-policy r = 1 exactly
        abs_log_r = log_r * jnp.sign(jax.lax.stop_gradient(log_r))
        return -adv * ratio + top * x["ppo_kl_coef"] * abs_log_r, ratio, top
    if s.loss == "dro":
        return -(adv * logp - 0.5 * x["dro_beta"] * log_r * log_r), ratio, jnp.zeros_like(ratio)
    raise ValueError(f"unknown loss {s.loss!r}; valid: {', '.join(LOSSES)}")


def policy_loss(logp: jnp.ndarray, old_logp: jnp.ndarray | None, ref_logp: jnp.ndarray | None,
                advantages: jnp.ndarray, mask: jnp.ndarray, s: AlgoConfig,
                truncated: jnp.ndarray | None = None, budget: int | None = None,
                divisors: Divisors | None = None, entropy: jnp.ndarray | None = None,
                rollout_weights: jnp.ndarray | None = None,
                sampler_logp: jnp.ndarray | None = None, numbers: jnp.ndarray | None = None
                ) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
    """Loss and diagnostics from log-probs [B, T], advantages [B] or [B, T]. None: `old_logp`
    on-policy, `ref_logp` no KL, `rollout_weights` no correction, `sampler_logp` (NaN where
    unknown) pi_old for off_policy_mask_threshold; `entropy` [B, T] for entropy_coef and
    top_entropy_quantile; `numbers` (runtime_numbers(s), traced) replaces s's RUNTIME_NUMBERS."""
    x = _numbers(s, numbers)

    logp = logp.astype(jnp.float32)
    old = jax.lax.stop_gradient(logp) if old_logp is None else old_logp.astype(jnp.float32)
    mask = kept_mask(mask, advantages, truncated, s)
    adv = advantages.astype(jnp.float32)
    adv = adv if adv.ndim == 2 else adv[:, None]
    if rollout_weights is not None:
        rollout_weights = jax.lax.stop_gradient(rollout_weights.astype(jnp.float32))
    per_token, ratio, was_clipped = per_token_loss(logp, old, adv, mask, s, rollout_weights,
                                                   numbers)
    # TRL's clip statistics: tokens whose update the clip removed, below and above.
    low = ((ratio < 1.0 - x["epsilon"]) & (adv < 0)).astype(jnp.float32)
    high = ((ratio > 1.0 + x["epsilon_high"]) & (adv > 0)).astype(jnp.float32)
    if s.off_policy_mask_threshold is not None:
        behaviour = old if sampler_logp is None else sampler_logp.astype(jnp.float32)
        drift = jnp.nan_to_num(behaviour - jax.lax.stop_gradient(logp), nan=0.0) * mask
        mean_drift = drift.sum(-1, keepdims=True) / jnp.maximum(mask.sum(-1, keepdims=True), 1.0)
        per_token = per_token * ((adv >= 0) | (mean_drift <= x["off_policy_mask_threshold"]))
    effective = mask
    if s.top_entropy_quantile < 1.0:
        if entropy is None:
            raise ValueError("top_entropy_quantile < 1 needs the per-token entropy")
        effective = mask * high_entropy_mask(entropy, mask, x["top_entropy_quantile"])
        per_token = per_token * effective
    if rollout_weights is not None and s.loss != "vespo":
        per_token = per_token * rollout_weights
    pg = aggregate(per_token, mask, s.loss_agg, budget, divisors)
    if ref_logp is not None:
        kl_tok = kl_estimate(logp, ref_logp, s.kl_estimator)
        kl = masked_mean(kl_tok, mask)
        if s.use_bias_correction_kl:
            kl_tok = kl_tok * ratio
        kl_loss = aggregate(kl_tok, mask, s.loss_agg, budget, divisors)
    else:
        kl_loss = kl = jnp.zeros((), jnp.float32)
    loss = pg + x["beta"] * kl_loss if s.beta else pg
    if s.entropy_coef:
        if entropy is None:
            raise ValueError("entropy_coef needs the per-token entropy")
        # TRL: the mean entropy of the tokens the policy term acts on, whatever the loss's
        # aggregation, so entropy_coef means the same for every loss.
        loss = loss - x["entropy_coef"] * masked_mean(entropy.astype(jnp.float32), effective)
    m = mask > 0
    any_token = m.any()
    aux = {
        "pg_loss": pg,
        "kl": kl,
        "clip_fraction": masked_mean(was_clipped, mask),
        "ratio_mean": masked_mean(ratio, mask),
        "ratio_max": jnp.where(any_token, jnp.max(jnp.where(m, ratio, -jnp.inf)), 1.0),
        "ratio_min": jnp.where(any_token, jnp.min(jnp.where(m, ratio, jnp.inf)), 1.0),
        "clip_ratio/low_mean": masked_mean(low, mask),
        "clip_ratio/high_mean": masked_mean(high, mask),
        "clip_ratio/region_mean": masked_mean(jnp.maximum(low, high), mask),
    }
    return loss, aux

"""rlexp's losses against TRL 1.16's own `GRPOTrainer._compute_loss` on identical inputs.

8 completions in 2 groups of 4, ragged lengths, two truncated at the budget without EOS,
old log-probs off-policy so that clipping acts at token and at sequence level; each algorithm
x scale_rewards x mask_truncated x beta. The conventions are set equal: advantage epsilon
1e-4 (TRL's; rlexp's is 1e-6), TRL's use_bias_correction_kl off, no dynamic sampling (TRL
has none). The one documented difference is kept: with mask_truncated, GRPO/GSPO's mean over
sequences divides by the rows left (rlexp) rather than all rows (TRL), 8/6 here.

rlexp sees the completions padded wider (8) than the budget (6, TRL's max_completion_length):
truncation and Dr.GRPO's constant must follow rollout.max_completion_length, not the width.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import require
from rlexp.algo.advantages import group_advantages
from rlexp.config.schema import AlgoConfig
from trl_oracle import trl_available, trl_losses

from rlexp.engine import algo_registry as registry  # noqa: E402  (a broken import fails here, never skips)
from tunix.rl.grpo.grpo_learner import TrainExample  # noqa: E402

# A child process imports torch, transformers and trl (7 s on 2 idle cores); then 60 cases.
pytestmark = pytest.mark.slow

B, G, BUDGET, WIDE, EOS, PAD = 8, 4, 6, 8, 5, 0
LENGTHS = [3, 6, 2, 6, 4, 6, 5, 1]
TRUNCATED = (1, 5)  # full length, no EOS; row 3 is full and ends in EOS
# Sequence log-ratios: inside GSPO's 3e-4/4e-4 range, just outside it, and far outside.
OFFSETS = [2e-4, -0.45, 0.35, -1e-4, 3.5e-4, 0.3, 5e-4, 0.25]

ALGOS = {  # name -> (rlexp algo settings, TRL loss_type and importance_sampling_level)
    "grpo": (dict(loss_agg="sequence-mean-token-mean", epsilon=0.2, epsilon_high=0.2),
             ("grpo", "token")),
    "gspo": (dict(loss_agg="sequence-mean-token-mean", epsilon=3e-4, epsilon_high=4e-4,
                  ratio_level="sequence"), ("grpo", "sequence")),
    "gspo_eps0.2": (dict(loss_agg="sequence-mean-token-mean", epsilon=0.2, epsilon_high=0.2,
                         ratio_level="sequence"), ("grpo", "sequence")),
    "dapo": (dict(loss_agg="token-mean", epsilon=0.2, epsilon_high=0.28), ("dapo", "token")),
    "dr_grpo": (dict(loss_agg="sequence-mean-token-scale", epsilon=0.2, epsilon_high=0.2),
                ("dr_grpo", "token")),
}
CASES = [(name, scale, truncate, beta) for name in ALGOS for scale in ("group", "batch", "none")
         for truncate in (False, True) for beta in (0.0, 0.04)]


def inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    mask = (np.arange(BUDGET)[None, :] < np.array(LENGTHS)[:, None]).astype(np.float32)
    ids = rng.integers(1, EOS, size=(B, BUDGET))
    for row, n in enumerate(LENGTHS):
        if row not in TRUNCATED:
            ids[row, n - 1] = EOS
    ids = np.where(mask > 0, ids, PAD)
    logp = np.log(rng.uniform(0.05, 0.95, (B, BUDGET))).astype(np.float32)
    noise = rng.normal(0, 0.25, (B, BUDGET)) * mask
    noise -= (noise.sum(-1) / mask.sum(-1))[:, None] * mask  # each row's mean is its offset
    old = (logp - (np.array(OFFSETS)[:, None] + noise)).astype(np.float32)
    ref = (logp + rng.normal(0, 0.3, (B, BUDGET))).astype(np.float32)
    rewards = np.array([1.0, 0.0, 0.5, 1.0, 0.0, 0.0, 1.0, 0.5], np.float32)
    return dict(logp=logp * mask, old_logp=old * mask, ref_logp=ref * mask, mask=mask,
                completion_ids=ids.astype(np.int64), rewards=rewards,
                eos=np.array(EOS), pad=np.array(PAD))


def wide(x: np.ndarray) -> jnp.ndarray:
    return jnp.asarray(np.pad(x, ((0, 0), (0, WIDE - BUDGET))))


def rlexp_loss(data, name, scale, truncate, beta):
    settings = registry.algo_settings(
        AlgoConfig(name="gspo" if name.startswith("gspo") else name, num_generations=G,
                   num_iterations=2, beta=beta, kl_estimator="k3", scale_rewards=scale,
                   mask_truncated=truncate, dynamic_sampling=False, **ALGOS[name][0]),
        budget=BUDGET)
    adv = group_advantages(data["rewards"], G, eps=1e-4, scale=scale)  # TRL's epsilon
    ex = TrainExample(prompt_ids=None, prompt_mask=None,
                      completion_ids=wide(data["completion_ids"].astype(np.int32)),
                      completion_mask=wide(data["mask"]), advantages=jnp.asarray(adv),
                      ref_per_token_logps=wide(data["ref_logp"]),
                      old_per_token_logps=wide(data["old_logp"]))

    def f(lp):
        return registry.loss_from_logps(lp, ex, settings, EOS)

    (loss, aux), grad = jax.value_and_grad(f, has_aux=True)(wide(data["logp"]))
    return float(loss), np.asarray(grad), adv, aux


@pytest.fixture(scope="module")
def trl_results():
    require(trl_available(), "trl and torch are not installed in the torch directory",
            "bash scripts/setup --test")
    data = inputs()
    cases = [dict(loss_type=ALGOS[n][1][0], importance_sampling_level=ALGOS[n][1][1],
                  epsilon=ALGOS[n][0]["epsilon"], epsilon_high=ALGOS[n][0]["epsilon_high"],
                  beta=beta, scale_rewards=scale, mask_truncated=truncate,
                  max_completion_length=BUDGET, num_generations=G)
             for n, scale, truncate, beta in CASES]
    return data, dict(zip(CASES, trl_losses(data, cases)))


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_loss_and_gradient_equal_trls(trl_results, case):
    data, results = trl_results
    name, scale, truncate, beta = case
    want = results[case]
    loss, grad, adv, aux = rlexp_loss(data, *case)
    np.testing.assert_allclose(adv, want["advantages"], rtol=1e-6, atol=1e-6)
    # The documented convention: GRPO/GSPO average over the rows left, TRL over all rows.
    rows = (B - len(TRUNCATED)) / B if truncate and name != "dapo" and name != "dr_grpo" else 1.0
    np.testing.assert_allclose(loss * rows, want["loss"], rtol=2e-6, atol=1e-7)
    assert np.all(grad[:, BUDGET:] == 0)  # the padding beyond the budget
    np.testing.assert_allclose(grad[:, :BUDGET] * rows, want["grad"], rtol=1e-5, atol=1e-8)
    assert np.abs(want["grad"]).max() > 1e-3
    assert 0 < float(aux["clip_fraction"]) < 1  # clipping acts, and not on every token


def test_the_inputs_clip_at_token_and_at_sequence_level():
    """GSPO's paper range leaves some sequences inside and clips others; GRPO's 0.2 clips
    some tokens of sequences whose mean ratio is inside it."""
    data = inputs()
    _, _, _, token = rlexp_loss(data, "grpo", "group", False, 0.0)
    _, _, _, seq = rlexp_loss(data, "gspo", "group", False, 0.0)
    assert 0 < float(token["clip_fraction"]) < 1
    assert 0 < float(seq["clip_ratio/region_mean"]) < 1

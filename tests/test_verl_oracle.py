"""rlexp's GMPO, Clip-Cov and KL-Cov losses against verl 0.9.1's own core_algos.py functions
(compute_policy_loss_geo_mean, _clip_cov, _kl_cov) on identical inputs: loss and gradient
w.r.t. the log-probs, 24 cases each (2 draws of the inputs x scale_rewards x the loss's knobs;
loss_agg for the two Cov losses).

8 completions in 2 groups of 4, ragged lengths, old log-probs off-policy so GMPO's log-ratio
clip acts on some tokens. Clip-Cov: verl picks its tokens at random among the candidates
(torch.randperm) and rlexp the largest covariances, so every case is built with no more
candidates than the share allows (checked here), where both cut them all.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import require
from rlexp.algo.advantages import group_advantages
from rlexp.config.schema import AlgoConfig
from verl_oracle import verl_available, verl_losses

from rlexp.engine import algo_registry as registry  # noqa: E402  (a broken import fails here)
from tunix.rl.grpo.grpo_learner import TrainExample  # noqa: E402

# A child process imports torch and verl (10-15 s on 2 idle cores); then 72 cases.
pytestmark = pytest.mark.slow

B, G, T = 8, 4, 6
LENGTHS = [3, 6, 2, 6, 4, 6, 5, 1]
SEEDS = (0, 1)
SCALES = ("group", "batch", "none")
VERL_AGG = {"token-mean": "token-mean", "sequence-mean-token-mean": "seq-mean-token-mean"}

# loss -> variants: (rlexp AlgoConfig settings, verl's names for them)
VARIANTS = {
    "gmpo": [dict(epsilon=e, epsilon_high=h, loss_agg="sequence-mean-token-mean")
             for e, h in ((0.4, 0.4), (0.2, 0.3), (0.1, 0.05), (1.0, 1.0))],
    "clip_cov": [dict(epsilon=0.2, epsilon_high=0.28, loss_agg=agg, clip_cov_ratio=r,
                      clip_cov_lb=lb, clip_cov_ub=ub)
                 for agg in VERL_AGG for r, lb, ub in ((1.0, 0.02, 5.0), (0.5, 0.1, 0.6))],
    "kl_cov": [dict(epsilon=0.2, loss_agg=agg, kl_cov_ratio=r, ppo_kl_coef=c)
               for agg in VERL_AGG for r, c in ((0.1, 1.0), (0.3, 0.5))],
}
CASES = [(loss, v, seed, scale) for loss in VARIANTS for v in range(len(VARIANTS[loss]))
         for seed in SEEDS for scale in SCALES]


def inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = (np.arange(T)[None, :] < np.array(LENGTHS)[:, None]).astype(np.float32)
    logp = np.log(rng.uniform(0.05, 0.95, (B, T))).astype(np.float32)
    old = (logp - rng.normal(0, 0.3, (B, T))).astype(np.float32)
    rewards = rng.choice([0.0, 0.5, 1.0], size=B).astype(np.float32)
    rewards[:2] = (1.0, 0.0)  # the first group always varies
    out = dict(logp=logp * mask, old_logp=old * mask, mask=mask, rewards=rewards)
    for scale in SCALES:
        out[f"adv_{scale}"] = group_advantages(rewards, G, scale=scale)
    return out


def rlexp_loss(data, loss, settings, scale):
    cfg = AlgoConfig(name=loss, loss=loss, num_generations=G, num_iterations=2, beta=0.0,
                     scale_rewards=scale, **settings)
    algo = registry.algo_settings(cfg, budget=T)
    ex = TrainExample(prompt_ids=None, prompt_mask=None, completion_ids=None,
                      completion_mask=jnp.asarray(data["mask"]),
                      advantages=jnp.asarray(data[f"adv_{scale}"]), ref_per_token_logps=None,
                      old_per_token_logps=jnp.asarray(data["old_logp"]))

    def f(lp):
        return registry.loss_from_logps(lp, ex, algo)

    (value, aux), grad = jax.value_and_grad(f, has_aux=True)(jnp.asarray(data["logp"]))
    return float(value), np.asarray(grad), aux


def verl_case(loss, settings, scale):
    case = dict(loss_mode={"gmpo": "geo_mean"}.get(loss, loss), advantages=f"adv_{scale}",
                loss_agg_mode=VERL_AGG[settings["loss_agg"]],
                clip_ratio_low=settings["epsilon"],
                clip_ratio_high=settings.get("epsilon_high") or settings["epsilon"])
    case.update({k: v for k, v in settings.items() if k.startswith(("clip_cov", "kl_cov", "ppo"))})
    return case


def clip_cov_candidates(data, settings, scale) -> tuple[int, int]:
    """NumPy: tokens Clip-Cov may cut (unclipped, covariance inside the window), and how many
    it cuts at most."""
    m = data["mask"] > 0
    adv = np.broadcast_to(data[f"adv_{scale}"][:, None], m.shape)
    lp, old = data["logp"].astype(np.float64), data["old_logp"].astype(np.float64)
    ratio = np.exp(lp - old)
    bounded = np.clip(ratio, 1 - settings["epsilon"], 1 + settings["epsilon_high"])
    clipped = -adv * bounded > -adv * ratio
    cov = (adv - adv[m].mean()) * (lp - lp[m].mean())
    cand = m & ~clipped & (cov > settings["clip_cov_lb"]) & (cov < settings["clip_cov_ub"])
    return int(cand.sum()), max(int(settings["clip_cov_ratio"] * m.sum()), 1)


@pytest.fixture(scope="module")
def verl_results():
    require(verl_available(), "verl (and torch) are not installed in the torch directory",
            "bash scripts/setup --test")
    data = {seed: inputs(seed) for seed in SEEDS}
    out = {}
    for seed in SEEDS:
        cases = [c for c in CASES if c[2] == seed]
        got = verl_losses(data[seed], [verl_case(c[0], VARIANTS[c[0]][c[1]], c[3]) for c in cases])
        out.update(zip(cases, got))
    return data, out


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_loss_and_gradient_equal_verls(verl_results, case):
    data, results = verl_results
    loss, v, seed, scale = case
    settings = VARIANTS[loss][v]
    d = data[seed]
    if loss == "clip_cov":
        cand, most = clip_cov_candidates(d, settings, scale)
        assert 0 < cand <= most, (cand, most)  # the cut acts, and deterministically
    want = results[case]
    value, grad, aux = rlexp_loss(d, loss, settings, scale)
    np.testing.assert_allclose(value, want["loss"], rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(grad, want["grad"], rtol=1e-5, atol=1e-8)
    assert np.abs(want["grad"]).max() > 1e-3


def test_gmpo_clips_some_tokens_and_not_all():
    _, _, aux = rlexp_loss(inputs(0), "gmpo", VARIANTS["gmpo"][0], "group")
    assert 0 < float(aux["clip_fraction"]) < 1

"""rlexp's GMPO, Clip-Cov, KL-Cov and DRO losses against verl 0.9.1's own core_algos.py functions
(compute_policy_loss_geo_mean, _clip_cov, _kl_cov, _dro) on identical inputs: loss and gradient
w.r.t. the log-probs, 24 cases each (2 draws of the inputs x scale_rewards x the loss's knobs;
loss_agg for the Cov losses and DRO). Then the Cov losses' token count: ties (4 equal
covariances, k = 2) and k in float64 (0.29 x 100 tokens = 28, not float32's 29).

8 completions in 2 groups of 4, ragged lengths, old log-probs off-policy so GMPO's log-ratio
clip acts on some tokens. Clip-Cov: verl picks its tokens at random among the candidates
(torch.randperm) and rlexp the largest covariances, so every case is built with no more
candidates than the share allows (checked here), where both cut them all; with ties, all
candidates equal, so which ones verl draws changes no value, only where the zeros sit.
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
    "dro": [dict(epsilon=0.2, loss_agg=agg, dro_beta=b) for agg in VERL_AGG for b in (0.1, 2.0)],
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
    case.update({k: v for k, v in settings.items()
                 if k.startswith(("clip_cov", "kl_cov", "ppo", "dro"))})
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


def tied_inputs() -> dict[str, np.ndarray]:
    """inputs(0) with 4 tokens of row 1 (advantage -1.3) made equal and unlikely (p = 1e-4):
    4 equal covariances, the batch's largest, each ratio 1.05 (not clipped)."""
    d = inputs(0)
    d["adv_group"] = group_advantages(d["rewards"], G, scale="group")
    assert d["adv_group"][1] < -1.0
    d["logp"][1, :4] = np.log(1e-4)
    d["old_logp"][1, :4] = np.float32(np.log(1e-4) - 0.05)
    return d


def tie_window(d) -> tuple[float, float]:
    """A Clip-Cov window around the tied covariance only, and that it is the largest."""
    m = d["mask"] > 0
    adv = np.broadcast_to(d["adv_group"][:, None], m.shape)
    lp = d["logp"].astype(np.float64)
    cov = (adv - adv[m].mean()) * (lp - lp[m].mean())
    tie = cov[1, 0]
    assert np.sum(np.abs(cov[m] - tie) < 1e-3) == 4 and np.sum(cov[m] > tie - 1.0) == 4
    return tie - 1e-3, tie + 1e-3


# 33 tokens: share 0.07 -> k = int(2.31) = 2 of the 4 tied.
TIE_SHARE = 0.07


def tie_settings(loss: str, d) -> dict:
    lb, ub = tie_window(d)
    if loss == "clip_cov":
        return dict(epsilon=0.2, epsilon_high=0.28, loss_agg="token-mean",
                    clip_cov_ratio=TIE_SHARE, clip_cov_lb=lb, clip_cov_ub=ub)
    return dict(epsilon=0.2, loss_agg="token-mean", kl_cov_ratio=TIE_SHARE, ppo_kl_coef=1.0)


@pytest.fixture(scope="module")
def tie_results():
    require(verl_available(), "verl (and torch) are not installed in the torch directory",
            "bash scripts/setup --test")
    d = tied_inputs()
    losses = ("clip_cov", "kl_cov")
    got = verl_losses(d, [verl_case(loss, tie_settings(loss, d), "group") for loss in losses])
    return d, dict(zip(losses, got))


@pytest.mark.parametrize("loss", ["clip_cov", "kl_cov"])
def test_ties_cut_exactly_k_tokens_as_verl(tie_results, loss):
    d, results = tie_results
    want = results[loss]
    assert int(TIE_SHARE * d["mask"].sum()) == 2
    value, grad, _ = rlexp_loss(d, loss, tie_settings(loss, d), "group")
    np.testing.assert_allclose(value, want["loss"], rtol=2e-6, atol=1e-7)
    # Which 2 of the 4 equal tokens verl drew is random: the same values, maybe elsewhere.
    np.testing.assert_allclose(np.sort(grad[1, :4]), np.sort(want["grad"][1, :4]), rtol=1e-5)
    np.testing.assert_allclose(np.delete(grad, 1, 0), np.delete(want["grad"], 1, 0), rtol=1e-5,
                               atol=1e-8)
    # rlexp's pick: the 2 earliest of the tie.
    tied = grad[1, :4]
    assert tied[0] == tied[1] and tied[2] == tied[3] and tied[0] != tied[2]


def test_kl_cov_counts_its_tokens_in_float64_as_verl():
    """100 tokens at kl_cov_ratio 0.29: verl's int(0.29 * 100) is 28 (float32 makes 29)."""
    require(verl_available(), "verl (and torch) are not installed in the torch directory",
            "bash scripts/setup --test")
    rng = np.random.default_rng(3)
    n = 10
    rewards = rng.choice([0.0, 0.5, 1.0], size=n).astype(np.float32)
    rewards[[0, 1, 5, 6]] = (1.0, 0.0, 1.0, 0.0)  # both groups of 5 vary
    logp = np.log(rng.uniform(0.05, 0.95, (n, n))).astype(np.float32)
    d = dict(logp=logp, old_logp=(logp - rng.normal(0, 0.3, (n, n))).astype(np.float32),
             mask=np.ones((n, n), np.float32), rewards=rewards,
             adv_group=group_advantages(rewards, 5, scale="group"))
    assert int(0.29 * 100) == 28 and int(np.float32(0.29) * np.float32(100)) == 29
    settings = dict(epsilon=0.2, loss_agg="token-mean", kl_cov_ratio=0.29, ppo_kl_coef=1.0)
    want = verl_losses(d, [verl_case("kl_cov", settings, "group")])[0]
    value, grad, aux = rlexp_loss(d, "kl_cov", settings, "group")
    np.testing.assert_allclose(value, want["loss"], rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(grad, want["grad"], rtol=1e-5, atol=1e-8)
    assert round(float(aux["clip_fraction"]) * 100) == 28  # the tokens penalised


def test_share_count_is_verls_python_arithmetic():
    """max(1, int(share x n)) for every n up to 5000 at shares where float32 rounds across an
    integer (0.29 x 100, 0.57 x 100, 0.7 x 10) and at the defaults."""
    from rlexp.algo.losses import share_count

    n = np.arange(5001)
    for share in (0.29, 0.57, 0.7, 0.1, 1 / 3, 2e-4, 1.0):
        got = np.asarray(jax.jit(jax.vmap(lambda k: share_count(share, k, 5000)))(n))
        want = np.array([max(int(share * int(k)), 1) for k in n])
        np.testing.assert_array_equal(got, want, err_msg=str(share))

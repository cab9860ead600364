"""GRPO/GSPO losses, group advantages and KL estimators: hand-computed values and a NumPy
reference, through the functions rlexp registers into Tunix."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlexp.algo.advantages import group_advantages
from rlexp.algo.kl import kl_estimate
from rlexp.algo.losses import aggregate, policy_loss
from rlexp.config.schema import AlgoConfig
from rlexp.engine import algo_registry as registry
from tunix.rl import function_registry
from tunix.rl.common import TrainExample


# ------------------------------------------------------------------ NumPy reference

def np_aggregate(x, mask, mode, budget=None):
    x = x * mask
    lengths = mask.sum(-1)
    rows = max((lengths > 0).sum(), 1)
    if mode == "token-mean":
        return x.sum() / max(mask.sum(), 1)
    if mode == "sequence-mean-token-mean":
        return (x.sum(-1) / np.maximum(lengths, 1)).sum() / rows
    if mode == "sequence-mean-token-scale":  # Dr.GRPO: all rows x the budget, masks or not
        return x.sum() / (x.shape[0] * (x.shape[-1] if budget is None else budget))
    return x.sum() / rows


def np_kl(logp, ref, est):
    d = ref - logp
    return {"k1": -d, "k2": 0.5 * d * d, "k3": np.exp(d) - 1 - d}[est]


def np_loss(logp, old, ref, adv, mask, level, eps, eps_high, beta, est, agg,
            group=None, truncated=None):
    """`group`: G for dynamic sampling (loops over groups); `truncated`: rows to drop."""
    mask = mask.copy()
    if group is not None:
        for g in range(0, len(adv), group):
            if all(a == 0 for a in adv[g:g + group]):
                mask[g:g + group] = 0
    if truncated is not None:
        mask[truncated] = 0
    log_r = np.clip(logp - old, -20, 20)
    if level == "sequence":
        seq = (log_r * mask).sum(-1) / np.maximum(mask.sum(-1), 1)
        log_r = np.repeat(seq[:, None], logp.shape[1], axis=1)
    r = np.exp(log_r)
    a = adv[:, None]
    per = np.maximum(-a * r, -a * np.clip(r, 1 - eps, 1 + eps_high))
    loss = np_aggregate(per, mask, agg)
    if ref is not None:
        loss += beta * np_aggregate(np_kl(logp, ref, est), mask, agg)
    return loss


def example(logp_shape=(4, 5), seed=0):
    rng = np.random.default_rng(seed)
    logp = np.log(rng.uniform(0.05, 0.95, logp_shape)).astype(np.float32)
    old = (logp + rng.normal(0, 0.3, logp_shape)).astype(np.float32)
    ref = (logp + rng.normal(0, 0.5, logp_shape)).astype(np.float32)
    adv = rng.normal(0, 1, logp_shape[0]).astype(np.float32)
    mask = np.ones(logp_shape, np.float32)
    mask[1, 3:] = 0  # a shorter completion
    mask[2, 1:] = 0
    return logp, old, ref, adv, mask


def settings(level="token", eps=0.2, eps_high=0.28, beta=0.04, est="k3", agg="sequence-mean-token-mean"):
    return AlgoConfig(ratio_level=level, epsilon=eps, epsilon_high=eps_high, beta=beta,
                      kl_estimator=est, loss_agg=agg)


# ------------------------------------------------------------------ hand-computed values

def test_group_advantages_hand_computed():
    adv = group_advantages(np.array([1.0, 0, 0, 0, 1, 1, 1, 1]), 4)
    # group 1: mean 0.25, std (ddof=1) 0.5; group 2: all equal -> 0
    np.testing.assert_allclose(adv, [1.5, -0.5, -0.5, -0.5, 0, 0, 0, 0], atol=1e-5)


def test_group_advantages_rejects_ragged_groups():
    with pytest.raises(ValueError):
        group_advantages(np.zeros(6), 4)


@pytest.mark.parametrize("est, value", [("k1", math.log(2)), ("k2", 0.5 * math.log(2) ** 2),
                                         ("k3", 0.5 - 1 + math.log(2))])
def test_kl_estimators_hand_computed(est, value):
    # pi = 0.5, pi_ref = 0.25 -> d = log(ref/pi) = -log 2
    got = kl_estimate(jnp.log(jnp.array([0.5])), jnp.log(jnp.array([0.25])), est)
    np.testing.assert_allclose(np.asarray(got), [value], rtol=1e-5)


def test_kl_k1_can_be_negative_k2_k3_cannot():
    logp, ref = jnp.log(jnp.array([0.25, 0.5])), jnp.log(jnp.array([0.5, 0.25]))
    assert float(kl_estimate(logp, ref, "k1")[0]) < 0
    for est in ("k2", "k3"):
        assert np.all(np.asarray(kl_estimate(logp, ref, est)) >= 0)


def test_grpo_token_clipping_hand_computed():
    # one completion, two tokens: ratios 1.25 and 1.0, advantage 1, eps 0.2
    logp = jnp.log(jnp.array([[0.5, 0.25]]))
    old = jnp.log(jnp.array([[0.4, 0.25]]))
    loss, aux = policy_loss(logp, old, None, jnp.array([1.0]), jnp.ones((1, 2)),
                            settings(eps=0.2, eps_high=0.2, beta=0.0))
    # token 0 clipped to 1.2 -> -1.2; token 1 -> -1.0; sequence mean -1.1
    np.testing.assert_allclose(float(loss), -1.1, rtol=1e-5)
    np.testing.assert_allclose(float(aux["clip_fraction"]), 0.5)


def test_gspo_sequence_ratio_hand_computed():
    logp = jnp.log(jnp.array([[0.5, 0.25]]))
    old = jnp.log(jnp.array([[0.4, 0.25]]))
    s = math.exp(0.5 * math.log(1.25))  # geometric mean of the token ratios = 1.1180
    loss, aux = policy_loss(logp, old, None, jnp.array([1.0]), jnp.ones((1, 2)),
                            settings(level="sequence", eps=0.2, eps_high=0.2, beta=0.0))
    np.testing.assert_allclose(float(loss), -s, rtol=1e-5)
    assert float(aux["clip_fraction"]) == 0.0
    # the GSPO paper's clip range clips the whole sequence
    loss, aux = policy_loss(logp, old, None, jnp.array([1.0]), jnp.ones((1, 2)),
                            settings(level="sequence", eps=3e-4, eps_high=4e-4, beta=0.0))
    np.testing.assert_allclose(float(loss), -(1 + 4e-4), rtol=1e-6)
    np.testing.assert_allclose(float(aux["clip_fraction"]), 1.0)


def test_aggregations_hand_computed():
    x = jnp.array([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = jnp.array([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert float(aggregate(x, mask, "token-mean")) == pytest.approx(10 / 4)
    assert float(aggregate(x, mask, "sequence-mean-token-mean")) == pytest.approx((2 + 4) / 2)
    assert float(aggregate(x, mask, "sequence-mean-token-sum")) == pytest.approx((6 + 4) / 2)


# ------------------------------------------------------------------ NumPy reference, registered path

@pytest.mark.parametrize("name", ["grpo", "gspo"])
@pytest.mark.parametrize("est", ["k1", "k2", "k3"])
@pytest.mark.parametrize("agg", ["token-mean", "sequence-mean-token-mean", "sequence-mean-token-sum"])
def test_registered_loss_matches_numpy(name, est, agg):
    """loss_from_logps is what the loss rlexp registers into Tunix computes after the
    forward pass; the AlgoSettings come from the same function the engine uses."""
    logp, old, ref, adv, mask = example()
    algo = AlgoConfig(name=name, beta=0.1, epsilon=0.2, epsilon_high=0.28, kl_estimator=est,
                      loss_agg=agg, num_iterations=2)
    cfg = registry.algo_settings(algo)
    ex = TrainExample(prompt_ids=None, prompt_mask=None, completion_ids=None,
                      completion_mask=jnp.asarray(mask), advantages=jnp.asarray(adv),
                      ref_per_token_logps=jnp.asarray(ref), old_per_token_logps=jnp.asarray(old))
    loss, aux = registry.loss_from_logps(jnp.asarray(logp), ex, cfg)
    level = "sequence" if name == "gspo" else "token"
    want = np_loss(logp, old, ref, adv, mask, level, 0.2, 0.28, 0.1, est, agg)
    np.testing.assert_allclose(float(loss), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(aux["kl"]),
                               (np_kl(logp, ref, est) * mask).sum() / mask.sum(), rtol=1e-5)


def test_tunix_registry_resolves_to_rlexp_functions():
    cfg = registry.algo_settings(AlgoConfig(name="gspo", kl_estimator="k2"))
    assert function_registry.get_policy_loss_fn(cfg.policy_loss_fn) is registry.policy_loss_fn
    assert function_registry.get_advantage_estimator(cfg.advantage_estimator) is registry.advantage_fn
    # Tunix's own fields agree with ours (trap 5: Tunix's default KL is k1)
    assert (cfg.kl_loss_mode, cfg.loss_algo, cfg.loss.ratio_level) == ("mse_kl", "gspo-token",
                                                                "sequence")
    np.testing.assert_allclose(registry.advantage_fn(np.array([2.0, 0.0]), 2),
                               group_advantages(np.array([2.0, 0.0]), 2))


# ------------------------------------------------------------------ on-policy equivalence

def _grad(level, logp, old):
    _, _, ref, adv, mask = example()

    def f(lp):
        return policy_loss(lp, old, jnp.asarray(ref), jnp.asarray(adv), jnp.asarray(mask),
                           settings(level=level))[0]

    return np.asarray(jax.grad(f)(jnp.asarray(logp)))


def test_grpo_and_gspo_coincide_on_policy_and_differ_off_policy():
    logp, old, *_ = example()
    np.testing.assert_allclose(_grad("token", logp, None), _grad("sequence", logp, None), atol=1e-7)
    g_tok, g_seq = _grad("token", logp, jnp.asarray(old)), _grad("sequence", logp, jnp.asarray(old))
    assert np.abs(g_tok - g_seq).max() > 1e-3


def test_on_policy_loss_ignores_epsilon():
    logp, _, ref, adv, mask = example()
    args = (jnp.asarray(logp), None, jnp.asarray(ref), jnp.asarray(adv), jnp.asarray(mask))
    a = policy_loss(*args, settings(eps=0.2))[0]
    b = policy_loss(*args, settings(eps=1e-4, eps_high=1e-4))[0]
    assert float(a) == float(b)


# ------------------------------------------------------------------ DAPO, Dr.GRPO, TRL knobs

def test_advantage_scales_hand_computed():
    r = np.array([1.0, 0, 0, 0, 2, 2, 2, 2])
    # none (Dr.GRPO): r - group mean
    np.testing.assert_allclose(group_advantages(r, 4, scale="none"),
                               [0.75, -0.25, -0.25, -0.25, 0, 0, 0, 0], atol=1e-6)
    # batch: group-centred / batch std (ddof=1): mean 1.125, std = sqrt(sum (r-1.125)^2 / 7)
    std = math.sqrt((0.125**2 + 3 * 1.125**2 + 4 * 0.875**2) / 7)
    np.testing.assert_allclose(group_advantages(r, 4, scale="batch"),
                               np.array([0.75, -0.25, -0.25, -0.25, 0, 0, 0, 0]) / (std + 1e-6),
                               rtol=1e-5)
    # equal rewards whose float mean is off by an ulp (0.1 * 3 / 3) are exactly 0
    assert not group_advantages(np.array([0.1, 0.1, 0.1]), 3, scale="none").any()


def test_dynamic_sampling_drops_equal_groups_from_token_mean():
    # two groups of 2 rows x 2 tokens; group 0 had equal rewards (advantages 0)
    logp = jnp.log(jnp.full((4, 2), 0.5))
    mask = jnp.ones((4, 2))
    base = dict(ratio_level="token", epsilon=0.2, epsilon_high=0.28, beta=0.0, kl_estimator="k3",
                loss_agg="token-mean")
    # on-policy, ratio 1: the per-token loss is -A
    adv = jnp.array([0.0, 0.0, 1.0, 0.5])
    kept, _ = policy_loss(logp, None, None, adv, mask, AlgoConfig(**base))
    dropped, _ = policy_loss(logp, None, None, adv, mask,
                             AlgoConfig(**base, dynamic_sampling=True, num_generations=2))
    assert float(kept) == pytest.approx(-(2 * 1.0 + 2 * 0.5) / 8)  # 8 tokens
    assert float(dropped) == pytest.approx(-(2 * 1.0 + 2 * 0.5) / 4)  # group 0's 4 tokens dropped


def test_token_scale_divides_by_the_budget_not_the_length():
    x = jnp.array([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0]])
    mask = jnp.array([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    # (6/4 + 4/4) / 2 rows
    assert float(aggregate(x, mask, "sequence-mean-token-scale")) == pytest.approx(1.25)


def test_mask_truncated_drops_rows_without_eos():
    from rlexp.algo.losses import truncated_rows

    eos = 9
    ids = jnp.array([[5, 9, 0], [5, 6, 7], [5, 6, 9], [5, 0, 0]])
    mask = jnp.array([[1, 1, 0], [1, 1, 1], [1, 1, 1], [1, 0, 0]], jnp.float32)
    np.testing.assert_array_equal(np.asarray(truncated_rows(ids, mask, eos)),
                                  [False, True, False, False])
    logp = jnp.log(jnp.full((4, 3), 0.5))
    adv = jnp.array([1.0, 10.0, 1.0, 1.0])
    s = AlgoConfig(ratio_level="token", epsilon=0.2, epsilon_high=0.2, beta=0.0,
                   kl_estimator="k3", loss_agg="token-mean", mask_truncated=True)
    loss, _ = policy_loss(logp, None, None, adv, mask, s, truncated_rows(ids, mask, eos))
    assert float(loss) == pytest.approx(-1.0)  # row 1 (advantage 10) is out: mean of -1s


def test_clip_ratio_low_high_region_hand_computed():
    # four tokens: ratio 0.5 (A<0: low-clipped), 1.5 (A>0: high-clipped), 1.5 (A<0: not
    # clipped, the max picks the unclipped side), 1.0
    old = jnp.log(jnp.array([[0.5, 0.2, 0.2, 0.3]]))
    logp = jnp.log(jnp.array([[0.25, 0.3, 0.3, 0.3]]))
    s = AlgoConfig(ratio_level="token", epsilon=0.2, epsilon_high=0.28, beta=0.0,
                   kl_estimator="k3", loss_agg="token-mean")
    adv = jnp.array([[-1.0, 1.0, -1.0, 1.0]])
    _, aux = policy_loss(logp, old, None, adv, jnp.ones((1, 4)), s)
    assert float(aux["clip_ratio/low_mean"]) == pytest.approx(0.25)
    assert float(aux["clip_ratio/high_mean"]) == pytest.approx(0.25)
    assert float(aux["clip_ratio/region_mean"]) == pytest.approx(0.5)


def _algo_from_yaml(name: str, **over) -> AlgoConfig:
    from omegaconf import OmegaConf

    from rlexp.config.paths import conf_dir

    node = OmegaConf.merge(OmegaConf.structured(AlgoConfig),
                           OmegaConf.load(conf_dir() / "algo" / f"{name}.yaml"), over)
    return OmegaConf.to_object(node)


@pytest.mark.parametrize("name", ["grpo", "gspo", "dapo", "dr_grpo"])
@pytest.mark.parametrize("truncate", [False, True])
def test_shipped_algorithms_match_numpy(name, truncate):
    """Each conf/algo YAML's settings, off-policy, through the registered path."""
    logp, old, ref, adv, mask = example(logp_shape=(6, 5), seed=3)
    adv[0:2] = 0.0  # one group of equal rewards (G = 2 here)
    ids = np.full(mask.shape, 4, np.int32)
    ids[3, -1] = 7  # row 3 ends in EOS at the budget; rows 0, 4, 5 are truncated (full, no EOS)
    algo = _algo_from_yaml(name, num_generations=2, num_iterations=2, beta=0.1,
                           mask_truncated=truncate)
    cfg = registry.algo_settings(algo)
    ex = TrainExample(prompt_ids=None, prompt_mask=None, completion_ids=jnp.asarray(ids),
                      completion_mask=jnp.asarray(mask), advantages=jnp.asarray(adv),
                      ref_per_token_logps=jnp.asarray(ref), old_per_token_logps=jnp.asarray(old))
    loss, aux = registry.loss_from_logps(jnp.asarray(logp), ex, cfg, eos_id=7)
    level = "sequence" if name == "gspo" else "token"
    eps_high = algo.epsilon if algo.epsilon_high is None else algo.epsilon_high
    truncated = [0, 4, 5] if truncate else None
    want = np_loss(logp, old, ref, adv, mask, level, algo.epsilon, eps_high, 0.1,
                   algo.kl_estimator, algo.loss_agg,
                   group=2 if algo.dynamic_sampling else None, truncated=truncated)
    np.testing.assert_allclose(float(loss), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name, scale", [("dr_grpo", "none"), ("dapo", "group"), ("grpo", "batch")])
def test_registered_advantages_follow_scale_rewards(name, scale):
    algo = _algo_from_yaml(name, scale_rewards=scale)
    cfg = registry.algo_settings(algo)
    fn = function_registry.get_advantage_estimator(cfg.advantage_estimator)
    r = np.array([1.0, 0.0, 3.0, 3.0, 2.0, 0.0])
    np.testing.assert_allclose(fn(rewards=r, num_generations=2),
                               group_advantages(r, 2, scale=scale), rtol=1e-6)


def test_dr_grpo_advantages_match_tunix():
    """Tunix 0.1.7 ships Dr.GRPO's estimator (algo_core "drgrpo"): the same numbers."""
    tunix_fn = function_registry.get_advantage_estimator("drgrpo")
    r = np.array([1.0, 0.0, 0.5, 3.0, 3.0, 2.0])
    np.testing.assert_allclose(np.asarray(tunix_fn(r, 3)), group_advantages(r, 3, scale="none"),
                               rtol=1e-6)


def test_on_policy_knobs_act_where_clip_knobs_do_not():
    """The guard's premise (rlexp.job.guards): with num_iterations=1 (old_logp None) the clip
    range and ratio level change nothing, while aggregation, dynamic sampling and masking do."""
    from rlexp.job import guards

    logp, _, _, adv, mask = example()
    adv[0:2] = 0.0  # group 0 (G=2) had equal rewards

    def grad(**over):
        kw = dict(ratio_level="token", epsilon=0.2, epsilon_high=0.28, beta=0.0,
                  kl_estimator="k3", loss_agg="token-mean")
        kw.update(over)
        truncated = jnp.array([False, False, False, True])

        def f(lp):
            return policy_loss(lp, None, None, jnp.asarray(adv), jnp.asarray(mask),
                               AlgoConfig(**kw), truncated)[0]

        return np.asarray(jax.grad(f)(jnp.asarray(logp)))

    base = grad()
    np.testing.assert_array_equal(base, grad(epsilon=1e-3, epsilon_high=1e-3))
    np.testing.assert_allclose(base, grad(ratio_level="sequence"), atol=1e-7)
    for knob in (dict(loss_agg="sequence-mean-token-scale"),
                 dict(dynamic_sampling=True, num_generations=2), dict(mask_truncated=True)):
        assert np.abs(grad(**knob) - base).max() > 1e-4, knob
    assert {"algo.loss_agg", "algo.dynamic_sampling", "algo.mask_truncated",
            "algo.scale_rewards"} <= set(guards.ON_POLICY_KEYS)
    assert {"algo.epsilon", "algo.epsilon_high", "algo.ratio_level"} <= set(guards.NOOP_KEYS)


# ------------------------------------------------------------------ newer loss families

def test_masked_quantile_matches_numpy_linear_quantile():
    from rlexp.algo.losses import masked_quantile

    rng = np.random.default_rng(5)
    x = rng.uniform(0, 3, (4, 7)).astype(np.float32)
    mask = (rng.uniform(size=(4, 7)) > 0.3).astype(np.float32)
    for q in (0.0, 0.1, 0.37, 0.5, 0.8, 1.0):
        want = np.quantile(x[mask > 0], q)  # numpy's default is torch.quantile's "linear"
        got = float(masked_quantile(jnp.asarray(x), jnp.asarray(mask), q))
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert float(masked_quantile(jnp.asarray(x), jnp.zeros_like(jnp.asarray(mask)), 0.1)) == 0.0


def _loss_grad(loss, logp, old, adv, mask, **over):
    kw = dict(ratio_level="token", epsilon=0.2, epsilon_high=0.28, beta=0.0, kl_estimator="k3",
              loss_agg="token-mean", loss=loss)
    kw.update(over)

    def f(lp):
        return policy_loss(lp, None if old is None else jnp.asarray(old), None,
                           jnp.asarray(adv), jnp.asarray(mask), AlgoConfig(**kw))[0]

    return np.asarray(jax.grad(f)(jnp.asarray(logp)))


@pytest.mark.parametrize("loss", ["cispo", "sapo", "luspo", "vespo", "kl_cov"])
def test_on_policy_the_newer_losses_have_grpos_gradient(loss):
    """At ratio 1 (num_iterations=1): CISPO's weight is 1, SAPO's gate has slope 1, VESPO's
    phi(1) = 1, KL-Cov's |log r| has gradient 0 (as torch.abs): GRPO's policy gradient. The
    guard's NOOP_KEYS (SAPO's temperatures, VESPO's exponents) rest on this."""
    from rlexp.job import guards

    logp, _, _, adv, mask = example()
    base = _loss_grad("ppo_clip", logp, None, adv, mask)
    np.testing.assert_allclose(_loss_grad(loss, logp, None, adv, mask, sapo_temperature_pos=3.0,
                                          vespo_k_pos=5.0, kl_cov_ratio=0.5),
                               base, rtol=1e-5, atol=1e-7)
    assert {"algo.sapo_temperature_pos", "algo.vespo_k_pos"} <= set(guards.NOOP_KEYS)


def test_gmpo_on_policy_is_the_sequence_mean_of_grpo():
    logp, _, _, adv, mask = example()
    np.testing.assert_allclose(
        _loss_grad("gmpo", logp, None, adv, mask, loss_agg="sequence-mean-token-mean"),
        _loss_grad("ppo_clip", logp, None, adv, mask, loss_agg="sequence-mean-token-mean"),
        rtol=1e-5, atol=1e-7)


def test_the_newer_losses_differ_off_policy():
    logp, old, _, adv, mask = example()
    base = _loss_grad("ppo_clip", logp, old, adv, mask)
    for loss in ("cispo", "sapo", "gmpo", "vespo", "kl_cov"):
        assert np.abs(_loss_grad(loss, logp, old, adv, mask, kl_cov_ratio=0.5) - base).max() > 1e-4


def test_cispo_keeps_the_gradient_of_clipped_tokens():
    """Hand-computed: one token, A = 1, ratio e^0.5 = 1.65 above 1 + 0.28. PPO's clip zeroes its
    gradient; CISPO's is -clip(r) = -1.28 (the weight is stop-gradient, d log pi = 1)."""
    logp, old, adv, mask = np.array([[0.0]]), np.array([[-0.5]]), np.array([1.0]), np.ones((1, 1))
    assert _loss_grad("ppo_clip", logp, old, adv, mask)[0, 0] == 0.0
    np.testing.assert_allclose(_loss_grad("cispo", logp, old, adv, mask)[0, 0], -1.28, rtol=1e-6)


def test_top_entropy_quantile_and_entropy_bonus_hand_computed():
    """4 tokens of entropy 0.1, 0.5, 1.0, 2.0, A = 1 on-policy, token-mean: keeping the top
    half trains only the last two tokens (grad -1/4 each: the divisor stays 4 tokens, as TRL);
    the bonus is -coef x their mean entropy, with gradient -coef/2 on each."""
    logp = jnp.zeros((1, 4))
    ent = jnp.array([[0.1, 0.5, 1.0, 2.0]])
    s = AlgoConfig(ratio_level="token", epsilon=0.2, epsilon_high=0.2, beta=0.0,
                   kl_estimator="k3", loss_agg="token-mean", top_entropy_quantile=0.5,
                   entropy_coef=0.1)

    def f(lp, e):
        return policy_loss(lp, None, None, jnp.ones(1), jnp.ones((1, 4)), s, entropy=e)[0]

    loss, (g_lp, g_e) = jax.value_and_grad(f, argnums=(0, 1))(logp, ent)
    np.testing.assert_allclose(np.asarray(g_lp), [[0, 0, -0.25, -0.25]], atol=1e-7)
    np.testing.assert_allclose(np.asarray(g_e), [[0, 0, -0.05, -0.05]], atol=1e-7)
    np.testing.assert_allclose(float(loss), -0.5 - 0.1 * 1.5, rtol=1e-6)


def test_token_entropy_is_exact_and_never_negative():
    """-sum(p log p) against float64 NumPy on the same float32 logits: flat rows (V = 1000, a
    tie at the top, all equal: log V) and confident ones (one logit 10 to 32 above the rest:
    H from 0.5 down to 1e-9), to 2e-5 relative (float32 sums of 1000 terms). logz - sum(p x
    logits) errs by 1e-5 absolute and a plain float32 log_softmax by 4% of H at 1e-6."""
    rng = np.random.default_rng(0)
    flat = rng.normal(0, 1, (4, 1000))
    flat[1, :2] = flat[1].max() + 1.0  # a tie at the top
    flat[2] = 0.3
    confident = rng.normal(0, 1, (12, 1000))
    confident[:, 0] += np.linspace(10, 32, 12)[:] + 3.0
    logits = np.concatenate([flat, confident]).astype(np.float32)[:, None, :]
    x = logits.astype(np.float64)
    logp = x - x.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    want = -(np.exp(logp) * logp).sum(-1)
    assert want.min() < 1e-8 and want.max() > 6.0
    got = np.asarray(jax.jit(registry.token_entropy)(jnp.asarray(logits)))
    assert (got >= 0).all()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=0)
    np.testing.assert_allclose(got[2], math.log(1000), rtol=2e-5)


@pytest.mark.parametrize("name", ["rloo", "reinforce_pp", "reinforce_pp_baseline"])
def test_registered_estimators_follow_algo_advantage(name):
    from rlexp.algo.advantages import advantages_by_name

    cfg = registry.algo_settings(_algo_from_yaml(name))
    fn = function_registry.get_advantage_estimator(cfg.advantage_estimator)
    r = np.array([1.0, 0.0, 3.0, 3.0, 2.0, 0.0])
    np.testing.assert_allclose(fn(rewards=r, num_generations=2), advantages_by_name(name, r, 2))
    assert cfg.loss.advantage == name


def test_the_algorithms_sweep_runs_every_shipped_algorithm_off_policy():
    """sweeps/algorithms.yaml: every conf/algo/ option, num_iterations=2, one seed list."""
    from omegaconf import OmegaConf

    from rlexp.algo.algorithm import algorithms
    from rlexp.config.paths import conf_dir

    sweep = OmegaConf.load(conf_dir().parent / "sweeps" / "algorithms.yaml")
    params = sweep.hydra.sweeper.params
    swept = set(str(params.algo).split(","))
    assert swept == {p.stem for p in (conf_dir() / "algo").glob("*.yaml")} == set(algorithms())
    assert str(params["algo.num_iterations"]) == "2" and "train.seed" in params

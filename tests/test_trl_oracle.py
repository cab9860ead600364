"""rlexp's losses against TRL 1.16's own `GRPOTrainer._compute_loss` on identical inputs.

8 completions in 2 groups of 4, ragged lengths, two truncated at the budget without EOS,
old log-probs off-policy so that clipping acts at token and at sequence level; each algorithm
x scale_rewards x mask_truncated x beta. The conventions are set equal: advantage epsilon
1e-4 (TRL's; rlexp's is 1e-6), TRL's use_bias_correction_kl off, no dynamic sampling (TRL
has none). The one documented difference is kept: with mask_truncated, GRPO/GSPO's mean over
sequences divides by the rows left (rlexp) rather than all rows (TRL), 8/6 here.

rlexp sees the completions padded wider (8) than the budget (6, TRL's max_completion_length):
truncation and Dr.GRPO's constant must follow rollout.max_completion_length, not the width.

The newer loss families TRL has (CISPO, SAPO, LUSPO, VESPO) run 24 cases each (scale_rewards
x mask_truncated x beta x two settings of the loss's own knobs), and the entropy bonus and
high-entropy mask (entropy_coef, top_entropy_quantile) 20 cases over five losses, with
per-token entropies whose gradient is compared too. One convention differs by design: rlexp's
CISPO bounds the weight by 1 + epsilon_high like every other rlexp clip (verl's form), TRL by
epsilon_high itself, so TRL gets 1 + epsilon_high; rlexp's epsilon 1.0 = TRL's no lower bound.

Per-token weights on sequence-level losses (GSPO, LUSPO, and SAPO, CISPO, DAPO with the
sequence ratio): the high-entropy mask (12 cases, with the TRL losses above) and the token-level
rollout corrections (10 cases, TRL's own weights code, tests/trl_oracle.py --correction), where
TRL's row ratio spreads each row's gradient over all its tokens. TRL 1.16's last options
(use_bias_correction_kl, delta, off_policy_mask_threshold) run 12 cases, 2 of them with sampler
log-probs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import require
from rlexp.algo.advantages import group_advantages
from rlexp.config.schema import AlgoConfig
from trl_oracle import trl_available, trl_losses, trl_rollout_corrections

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

# Newer losses: name -> settings variants (rlexp AlgoConfig fields; each also a TRL case).
FAMILIES = {
    "cispo": [dict(loss="cispo", loss_agg="token-mean", epsilon=1.0, epsilon_high=0.2),
              dict(loss="cispo", loss_agg="token-mean", epsilon=1.0, epsilon_high=0.05)],
    "sapo": [dict(loss="sapo", loss_agg="sequence-mean-token-mean", epsilon=0.2,
                  sapo_temperature_pos=1.0, sapo_temperature_neg=1.05),
             dict(loss="sapo", loss_agg="sequence-mean-token-mean", epsilon=0.2,
                  sapo_temperature_pos=4.0, sapo_temperature_neg=8.0)],
    "luspo": [dict(loss="luspo", loss_agg="sequence-mean-token-sum", epsilon=3e-4,
                   epsilon_high=4e-4, ratio_level="sequence"),
              dict(loss="luspo", loss_agg="sequence-mean-token-sum", epsilon=0.2,
                   epsilon_high=0.28, ratio_level="sequence")],
    "vespo": [dict(loss="vespo", loss_agg="token-mean", epsilon=0.2),
              dict(loss="vespo", loss_agg="token-mean", epsilon=0.2, vespo_k_pos=1.0,
                   vespo_lambda_pos=0.5, vespo_k_neg=4.0, vespo_lambda_neg=5.0)],
}
FAMILY_CASES = [(name, v, scale, truncate, beta) for name in FAMILIES for v in (0, 1)
                for scale in ("group", "batch", "none") for truncate in (False, True)
                for beta in (0.0, 0.04)]
# Entropy: (entropy_coef, top_entropy_quantile) on five losses (no truncation: rlexp's
# rows-left convention would scale the policy term and not the bonus).
ENTROPY_LOSSES = {"grpo": ALGOS["grpo"][0] | dict(loss="ppo_clip"),
                  "dapo": ALGOS["dapo"][0] | dict(loss="ppo_clip"),
                  "cispo": FAMILIES["cispo"][0], "sapo": FAMILIES["sapo"][0],
                  "vespo": FAMILIES["vespo"][0]}
ENTROPY_CASES = [(name, coef, q) for name in ENTROPY_LOSSES
                 for coef, q in ((0.01, 1.0), (0.0, 0.2), (0.01, 0.5), (-0.02, 0.8))]
# Sequence-level losses, the per-token weights of item "GSPO under token weights".
SEQUENCE_LOSSES = {"gspo": ALGOS["gspo"][0], "luspo": FAMILIES["luspo"][1],
                   "sapo_seq": FAMILIES["sapo"][0] | dict(ratio_level="sequence"),
                   "cispo_seq": FAMILIES["cispo"][0] | dict(ratio_level="sequence"),
                   "dapo_seq": ALGOS["dapo"][0] | dict(ratio_level="sequence")}
ENTROPY_LOSSES |= SEQUENCE_LOSSES
ENTROPY_CASES += [(name, coef, q) for name in SEQUENCE_LOSSES for coef, q in ((0.0, 0.2),
                                                                            (0.01, 0.5))]
# (name, mode, clip_min, clip_max, TRL 1.16 options): token-level corrections on the sequence
# losses, and the options with sampler log-probs (off_policy_mask_threshold reads them).
WEIGHT_CASES = [(name, mode, 0.5, 2.0, {}) for name in SEQUENCE_LOSSES
                for mode in ("token_truncate", "token_mask")] + [
    ("gspo", "token_truncate", None, 3.0, dict(off_policy_mask_threshold=0.05)),
    ("dapo", "sequence_mask", 0.2, 5.0, dict(off_policy_mask_threshold=0.05, delta=1.3))]
# TRL 1.16's options: (name, options, beta), name in OPTION_LOSSES.
OPTION_LOSSES = {n: ALGOS[n][0] for n in ("grpo", "gspo", "gspo_eps0.2", "dapo")} | {
    n: FAMILIES[n][-1] for n in ("luspo", "cispo", "sapo", "vespo")}
OPTION_CASES = [
    ("grpo", dict(use_bias_correction_kl=True), 0.04),
    ("gspo_eps0.2", dict(use_bias_correction_kl=True), 0.04),
    ("dapo", dict(use_bias_correction_kl=True), 0.04),
    ("grpo", dict(delta=1.3), 0.0),
    ("dapo", dict(delta=1.3), 0.04),
    ("gspo_eps0.2", dict(delta=1.3), 0.0),
    ("luspo", dict(delta=1.05), 0.0),
    ("grpo", dict(off_policy_mask_threshold=0.1), 0.0),
    ("dapo", dict(off_policy_mask_threshold=0.1), 0.04),
    ("cispo", dict(off_policy_mask_threshold=0.1, use_bias_correction_kl=True), 0.04),
    ("sapo", dict(off_policy_mask_threshold=0.1), 0.0),
    ("vespo", dict(off_policy_mask_threshold=0.1, use_bias_correction_kl=True), 0.04),
]
# TRL's loss_type and importance_sampling_level of an rlexp setting.
TRL_LOSS = {"cispo": "cispo", "sapo": "sapo", "luspo": "luspo", "vespo": "vespo"}


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
    entropy = rng.uniform(0.05, 2.5, (B, BUDGET)).astype(np.float32)
    sampler = (old + rng.normal(0, 0.6, (B, BUDGET))).astype(np.float32)
    return dict(logp=logp * mask, old_logp=old * mask, ref_logp=ref * mask, mask=mask,
                completion_ids=ids.astype(np.int64), rewards=rewards,
                eos=np.array(EOS), pad=np.array(PAD), entropy=entropy * mask,
                sampler=sampler * mask, advantages=group_advantages(rewards, G, eps=1e-4))


def wide(x: np.ndarray) -> jnp.ndarray:
    return jnp.asarray(np.pad(x, ((0, 0), (0, WIDE - BUDGET))))


def rlexp_loss(data, name, scale, truncate, beta, algo=None, entropy=False, sampler=False):
    """rlexp's loss, gradient, advantages and aux; `sampler`: with data["sampler"] as the
    sampler's log-probs (algo's rollout_correction weights them)."""
    algo = ALGOS[name][0] if algo is None else algo
    name = name.removesuffix("_seq")
    settings = registry.algo_settings(
        AlgoConfig(name="gspo" if name.startswith("gspo") else name, num_generations=G,
                   num_iterations=2, beta=beta, kl_estimator="k3", scale_rewards=scale,
                   mask_truncated=truncate, dynamic_sampling=False, **algo),
        budget=BUDGET)
    adv = group_advantages(data["rewards"], G, eps=1e-4, scale=scale)  # TRL's epsilon
    ex = TrainExample(prompt_ids=None, prompt_mask=None,
                      completion_ids=wide(data["completion_ids"].astype(np.int32)),
                      completion_mask=wide(data["mask"]), advantages=jnp.asarray(adv),
                      ref_per_token_logps=wide(data["ref_logp"]),
                      old_per_token_logps=wide(data["old_logp"]))
    if sampler:
        ex = registry.with_sampler_logps(ex, wide(data["sampler"]))

    if entropy:
        def f(lp, ent):
            return registry.loss_from_logps(lp, ex, settings, EOS, ent)

        (loss, aux), (grad, grad_ent) = jax.value_and_grad(f, argnums=(0, 1), has_aux=True)(
            wide(data["logp"]), wide(data["entropy"]))
        return float(loss), np.asarray(grad), adv, aux, np.asarray(grad_ent)

    def f(lp):
        return registry.loss_from_logps(lp, ex, settings, EOS)

    (loss, aux), grad = jax.value_and_grad(f, has_aux=True)(wide(data["logp"]))
    return float(loss), np.asarray(grad), adv, aux


def trl_case(algo, scale, truncate, beta, **extra):
    """A TRL case for rlexp AlgoConfig settings `algo`."""
    loss = algo.get("loss", "ppo_clip")
    if loss == "ppo_clip":
        loss_type = {"token-mean": "dapo", "sequence-mean-token-mean": "grpo"}[algo["loss_agg"]]
    else:
        loss_type = TRL_LOSS[loss]
    high = algo.get("epsilon_high", algo["epsilon"])
    case = dict(loss_type=loss_type, importance_sampling_level=algo.get("ratio_level", "token"),
                epsilon=algo["epsilon"], epsilon_high=1.0 + high if loss == "cispo" else high,
                beta=beta, scale_rewards=scale, mask_truncated=truncate,
                max_completion_length=BUDGET, num_generations=G, **extra)
    case.update({k: v for k, v in algo.items() if k.startswith(("sapo_", "vespo_"))})
    return case


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
    family = [trl_case(FAMILIES[n][v], scale, truncate, beta)
              for n, v, scale, truncate, beta in FAMILY_CASES]
    entropy = [trl_case(ENTROPY_LOSSES[n], "group", False, 0.0, entropy_coef=coef,
                        top_entropy_quantile=q) for n, coef, q in ENTROPY_CASES]
    options = [trl_case(OPTION_LOSSES[n], "group", False, beta, **o) for n, o, beta in OPTION_CASES]
    keys = CASES + FAMILY_CASES + ENTROPY_CASES + [option_key(c) for c in OPTION_CASES]
    return data, dict(zip(keys, trl_losses(data, cases + family + entropy + options)))


def option_key(case) -> tuple:
    name, options, beta = case
    return (name, tuple(sorted(options.items())), beta)


def weight_settings(case) -> dict:
    name, mode, lo, hi, options = case
    return (SEQUENCE_LOSSES | OPTION_LOSSES)[name] | options | dict(
        rollout_correction=mode, rollout_correction_clip_min=lo, rollout_correction_clip_max=hi)


@pytest.fixture(scope="module")
def trl_weighted():
    require(trl_available(), "trl and torch are not installed in the torch directory",
            "bash scripts/setup --test")
    data = inputs()
    cases = [trl_case((SEQUENCE_LOSSES | OPTION_LOSSES)[name], "group", False, 0.0, mode=mode,
                      clip_min=lo, clip_max=hi, mask="mask", sampler="sampler", **options)
             for name, mode, lo, hi, options in WEIGHT_CASES]
    return data, dict(zip(map(weight_key, WEIGHT_CASES), trl_rollout_corrections(data, cases)))


def weight_key(case) -> tuple:
    return case[:4] + (tuple(sorted(case[4].items())),)


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


# rlexp's mean over the rows left vs TRL's over all rows (see the module docstring).
ROWS_LEFT = (B - len(TRUNCATED)) / B


@pytest.mark.parametrize("case", FAMILY_CASES, ids=lambda c: "-".join(map(str, c)))
def test_newer_losses_equal_trls(trl_results, case):
    data, results = trl_results
    name, v, scale, truncate, beta = case
    algo = FAMILIES[name][v]
    want = results[case]
    loss, grad, adv, aux = rlexp_loss(data, name, scale, truncate, beta, algo)
    np.testing.assert_allclose(adv, want["advantages"], rtol=1e-6, atol=1e-6)
    rows = ROWS_LEFT if truncate and algo["loss_agg"].startswith("sequence-mean") else 1.0
    np.testing.assert_allclose(loss * rows, want["loss"], rtol=2e-6, atol=1e-7)
    assert np.all(grad[:, BUDGET:] == 0)
    np.testing.assert_allclose(grad[:, :BUDGET] * rows, want["grad"], rtol=1e-5, atol=1e-8)
    assert np.abs(want["grad"]).max() > 1e-3


@pytest.mark.parametrize("case", ENTROPY_CASES, ids=lambda c: "-".join(map(str, c)))
def test_entropy_bonus_and_high_entropy_mask_equal_trls(trl_results, case):
    data, results = trl_results
    name, coef, q = case
    want = results[case]
    algo = ENTROPY_LOSSES[name] | dict(entropy_coef=coef, top_entropy_quantile=q)
    loss, grad, _, _, grad_ent = rlexp_loss(data, name, "group", False, 0.0, algo, entropy=True)
    np.testing.assert_allclose(loss, want["loss"], rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(grad[:, :BUDGET], want["grad"], rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(grad_ent[:, :BUDGET], want["grad_entropy"], rtol=1e-5, atol=1e-8)
    assert np.all(grad_ent[:, BUDGET:] == 0)
    if q < 1.0 and name not in SEQUENCE_LOSSES:  # the mask keeps some tokens, drops others
        kept = np.abs(want["grad"]) > 0
        assert 0 < kept.sum() < data["mask"].sum()
    if coef:
        assert np.abs(want["grad_entropy"]).max() > 1e-4


def test_the_newer_losses_clip_or_gate_off_policy():
    """CISPO's cap binds on some tokens and not all (the oracle cases are not vacuous)."""
    data = inputs()
    _, _, _, aux = rlexp_loss(data, "cispo", "group", False, 0.0, FAMILIES["cispo"][0])
    assert 0 < float(aux["clip_fraction"]) < 1


@pytest.mark.parametrize("case", WEIGHT_CASES, ids=lambda c: "-".join(map(str, c[:4] + (
    "-".join(c[4]),))))
def test_token_weights_on_sequence_losses_equal_trls(trl_weighted, case):
    """A token-level weight times TRL's row ratio: each row's gradient on all its tokens."""
    data, results = trl_weighted
    want = results[weight_key(case)]
    loss, grad, _, _ = rlexp_loss(data, case[0], "group", False, 0.0, weight_settings(case),
                                  sampler=True)
    np.testing.assert_allclose(loss, want["loss"], rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(grad[:, :BUDGET], want["grad"], rtol=1e-5, atol=1e-8)
    assert np.abs(want["grad"]).max() > 1e-3


@pytest.mark.parametrize("case", OPTION_CASES, ids=lambda c: "-".join(map(str, (
    c[0], *c[1], c[2]))))
def test_trls_last_options_equal_trls(trl_results, case):
    """use_bias_correction_kl, delta, off_policy_mask_threshold; each changes the gradient."""
    data, results = trl_results
    name, options, beta = case
    want = results[option_key(case)]
    algo = OPTION_LOSSES[name]
    loss, grad, _, _ = rlexp_loss(data, name, "group", False, beta, algo | options)
    np.testing.assert_allclose(loss, want["loss"], rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(grad[:, :BUDGET], want["grad"], rtol=1e-5, atol=1e-8)
    _, plain, _, _ = rlexp_loss(data, name, "group", False, beta, algo)
    assert np.abs(plain - grad).max() > 1e-4

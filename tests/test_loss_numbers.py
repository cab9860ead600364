"""The loss's runtime numbers (rlexp.algo.losses.RUNTIME_NUMBERS): read from an array, the loss
equals the one with the settings as constants, for every loss family, and its program is the
same whatever the numbers, so runs of a sweep over them share one compiled update."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlexp.algo.choices import LOSSES
from rlexp.algo.losses import RUNTIME_NUMBERS, policy_loss, runtime_numbers
from rlexp.algo.settings import AlgoConfig

B, T = 8, 6


def batch(seed: int = 0):
    rng = np.random.default_rng(seed)
    logp = jnp.asarray(-rng.uniform(0.05, 2.0, (B, T)), jnp.float32)
    old = logp + jnp.asarray(rng.normal(0, 0.3, (B, T)), jnp.float32)
    ref = logp + jnp.asarray(rng.normal(0, 0.2, (B, T)), jnp.float32)
    adv = jnp.asarray(rng.normal(size=B), jnp.float32)
    mask = jnp.asarray(np.arange(T)[None] < rng.integers(2, T + 1, (B, 1)), jnp.float32)
    sampler = old + jnp.asarray(rng.normal(0, 0.1, (B, T)), jnp.float32)
    entropy = jnp.asarray(rng.uniform(0, 3, (B, T)), jnp.float32)
    return logp, old, ref, adv, mask, sampler, entropy


def settings(loss: str, **over) -> AlgoConfig:
    """Every runtime number switched on (none None, none 0), so each reaches the loss."""
    base = dict(name="grpo", loss=loss, beta=0.04, epsilon=0.2, epsilon_high=0.28, delta=1.8,
                off_policy_mask_threshold=0.5, entropy_coef=0.01, top_entropy_quantile=0.8,
                ratio_level="token", clip_cov_lb=-1.0, clip_cov_ub=5.0)
    return AlgoConfig(**{**base, **over}).for_loss()


def loss_fn(s: AlgoConfig, with_numbers: bool):
    def f(logp, numbers, old, ref, adv, mask, sampler, entropy):
        return policy_loss(logp, old, ref, adv, mask, s, entropy=entropy, sampler_logp=sampler,
                           numbers=numbers if with_numbers else None)
    return f


def test_names_are_algo_fields_and_none_is_nan():
    fields = {f.name for f in dataclasses.fields(AlgoConfig)}
    assert set(RUNTIME_NUMBERS) <= fields and len(set(RUNTIME_NUMBERS)) == len(RUNTIME_NUMBERS)
    values = runtime_numbers(AlgoConfig().for_loss())
    assert values.dtype == np.float32 and values.shape == (len(RUNTIME_NUMBERS),)
    assert np.isnan(values[RUNTIME_NUMBERS.index("delta")])  # off
    assert values[RUNTIME_NUMBERS.index("epsilon_high")] == np.float32(0.2)  # for_loss: = epsilon


@pytest.mark.parametrize("loss", LOSSES)
def test_loss_and_gradient_from_the_array_equal_the_constants(loss):
    s = settings(loss)
    args = batch()
    numbers = jnp.asarray(runtime_numbers(s))
    grad = jax.value_and_grad(lambda *a: loss_fn(s, True)(*a)[0])
    const = jax.value_and_grad(lambda *a: loss_fn(s, False)(*a)[0])
    (v1, g1), (v0, g0) = jax.jit(grad)(args[0], numbers, *args[1:]), \
        jax.jit(const)(args[0], numbers, *args[1:])
    np.testing.assert_allclose(v1, v0, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(g1, g0, rtol=1e-5, atol=1e-7)
    _, aux1 = loss_fn(s, True)(args[0], numbers, *args[1:])
    _, aux0 = loss_fn(s, False)(args[0], numbers, *args[1:])
    for k in aux0:
        np.testing.assert_allclose(aux1[k], aux0[k], rtol=1e-6, atol=1e-7, err_msg=k)


def test_the_numbers_change_the_loss():
    """The array is read: other numbers, another loss (else the equality above proves nothing)."""
    s = settings("ppo_clip")
    args = batch()
    f = jax.jit(loss_fn(s, True))
    other = jnp.asarray(runtime_numbers(dataclasses.replace(s, epsilon=0.05, epsilon_high=0.05,
                                                            beta=0.5, delta=1.1)))
    a = f(args[0], jnp.asarray(runtime_numbers(s)), *args[1:])[0]
    b = f(args[0], other, *args[1:])[0]
    assert abs(float(a) - float(b)) > 1e-4


@pytest.mark.parametrize("loss", LOSSES)
def test_one_program_whatever_the_numbers(loss):
    """Two configs differing in every runtime number (not in None-or-not or zero-or-not): one
    lowered program when the numbers come as an array; as constants (today's control) two."""
    s1 = settings(loss)
    s2 = settings(loss, beta=0.08, epsilon=0.1, epsilon_high=0.3, delta=2.5,
                  off_policy_mask_threshold=0.7, entropy_coef=-0.02, top_entropy_quantile=0.6,
                  sapo_temperature_pos=0.9, sapo_temperature_neg=1.2, vespo_k_pos=1.5,
                  vespo_lambda_pos=2.5, vespo_k_neg=2.5, vespo_lambda_neg=1.5, clip_cov_lb=0.5,
                  clip_cov_ub=4.0, ppo_kl_coef=0.2, dro_beta=0.3)
    assert all(getattr(s1, k) != getattr(s2, k) for k in RUNTIME_NUMBERS)
    args = batch()

    def text(s, with_numbers):
        numbers = jnp.asarray(runtime_numbers(s))
        return jax.jit(loss_fn(s, with_numbers)).lower(args[0], numbers, *args[1:]).as_text()

    assert text(s1, True) == text(s2, True)
    assert text(s1, False) != text(s2, False)

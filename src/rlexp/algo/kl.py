"""Per-token estimators of KL(pi_theta || pi_ref) from samples of pi_theta (Schulman 2020).

With log-ratio d = log pi_ref(x) - log pi_theta(x), x ~ pi_theta:
  k1 = -d                 unbiased, high variance, can be negative
  k2 = d^2 / 2            biased, low variance, >= 0
  k3 = exp(d) - 1 - d     unbiased, low variance, >= 0 (the GRPO paper's estimator)
"""

from __future__ import annotations

import jax.numpy as jnp

from rlexp.algo.choices import KL_ESTIMATORS


def kl_estimate(logp: jnp.ndarray, ref_logp: jnp.ndarray, estimator: str) -> jnp.ndarray:
    """Per-token KL estimate; same shape as `logp`."""
    d = ref_logp.astype(jnp.float32) - logp.astype(jnp.float32)
    if estimator == "k1":
        return -d
    if estimator == "k2":
        return 0.5 * d * d
    if estimator == "k3":
        return jnp.exp(d) - 1.0 - d
    raise ValueError(f"unknown KL estimator {estimator!r}; valid: {', '.join(KL_ESTIMATORS)}")

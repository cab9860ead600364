"""Per-token estimators of KL(pi_theta || pi_ref) from samples of pi_theta (Schulman 2020).

With log-ratio d = log pi_ref(x) - log pi_theta(x), x ~ pi_theta:
  k1 = -d                 unbiased, high variance, can be negative
  k2 = d^2 / 2            biased, low variance, >= 0
  k3 = exp(d) - 1 - d     unbiased, low variance, >= 0 (the GRPO paper's estimator)
"""

from __future__ import annotations

import jax.numpy as jnp

ESTIMATORS = ("k1", "k2", "k3")
# Tunix's names for the same estimators (GRPOConfig.kl_loss_mode); Tunix's default is k1.
TUNIX_KL_MODE = {"k1": "kl", "k2": "mse_kl", "k3": "low_var_kl"}


def kl_estimate(logp: jnp.ndarray, ref_logp: jnp.ndarray, estimator: str) -> jnp.ndarray:
    """Per-token KL estimate; same shape as `logp`."""
    d = ref_logp.astype(jnp.float32) - logp.astype(jnp.float32)
    if estimator == "k1":
        return -d
    if estimator == "k2":
        return 0.5 * d * d
    if estimator == "k3":
        return jnp.exp(d) - 1.0 - d
    raise ValueError(f"unknown KL estimator {estimator!r}; valid: {', '.join(ESTIMATORS)}")

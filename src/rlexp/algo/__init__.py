"""Pure maths of GRPO/GSPO: group advantages, KL estimators, clipped policy losses.

`advantages` is NumPy only; `kl` and `losses` are jax.numpy (import them where JAX is wanted);
rlexp.engine.algo_registry plugs them into Tunix.
"""

"""Pure maths of GRPO/GSPO: group advantages, KL estimators, clipped policy losses.

`advantages` is NumPy only; `kl` and `losses` are jax.numpy (import them where JAX is wanted);
`registry` plugs them into Tunix (imported by the engine only).
"""

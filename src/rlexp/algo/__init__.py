"""Pure maths of GRPO/GSPO: group advantages, KL estimators, clipped policy losses.

`advantages` is NumPy only; `kl` and `losses` are jax.numpy (import them where JAX is wanted);
rlexp.engine.algo_registry plugs them into Tunix. `choices` spells the algorithm's choices
(KL estimators, loss aggregations, ratio levels, reward scalings) once and JAX-free, for the
maths and the config validator. `algorithm` defines `Algorithm` (a ratio level and an
advantage estimator) and finds them by name; `variants/` holds one module per named algorithm
(grpo, gspo, dapo, dr_grpo).

Layer: algo, pure maths. May import rlexp.base only.
"""

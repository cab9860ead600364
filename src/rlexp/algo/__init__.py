"""Pure maths of the algorithms: advantage estimators (group, RLOO, REINFORCE++), KL
estimators, policy losses (PPO clip, CISPO, SAPO, GMPO, LUSPO, VESPO, Clip-Cov, KL-Cov) and
entropy control.

`rollout_correction` weighs the trainer/sampler mismatch (TRL's vLLM importance-sampling
modes) and measures it.

`advantages` is NumPy only; `kl`, `losses` and `rollout_correction` are jax.numpy (import
them where JAX is wanted); rlexp.engine.algo_registry plugs them into Tunix. `choices` spells the algorithm's choices
(KL estimators, loss aggregations, ratio levels, reward scalings, losses, advantage
estimators) once and JAX-free, for the maths and the config validator. `algorithm` defines
`Algorithm` (a ratio level and an advantage estimator) and finds them by name; `variants/`
holds one module per named algorithm.

Layer: algo, pure maths. May import rlexp.base only.
"""

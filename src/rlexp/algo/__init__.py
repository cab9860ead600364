"""Pure maths of the algorithms: advantage estimators (`advantages`: group, RLOO, REINFORCE++;
NumPy only), KL estimators (`kl`), policy losses (PPO clip, CISPO, SAPO, GMPO, LUSPO, VESPO,
Clip-Cov, KL-Cov) and entropy control (`losses`), and the trainer/sampler mismatch's measure
and importance weights (`rollout_correction`); the last three are jax.numpy, plugged into
Tunix by rlexp.engine.algo_registry. `choices` spells the algorithm's choices once and
JAX-free, for the maths and the config validator; `settings` is the algo config section
(AlgoConfig: each field's default and valid values), which the loss reads as it is.
`algorithm` defines `Algorithm` (a ratio level and an advantage estimator) and finds them by
name; `variants/` holds one module per named algorithm.

Layer: algo, pure maths. May import rlexp.base only.
"""

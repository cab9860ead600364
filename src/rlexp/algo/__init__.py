"""Pure maths of the algorithms: advantage estimators (`advantages`, NumPy), KL estimators
(`kl`), policy losses and entropy control (`losses`), the trainer/sampler mismatch's measure
and weights (`rollout_correction`); the last three are jax.numpy, plugged into Tunix by
rlexp.engine.algo_registry. `choices` spells the choices once, JAX-free; `settings` is the algo
config section the loss reads; `algorithm` finds an `Algorithm` by name in `variants/`.

Layer: algo, pure maths. May import rlexp.base only.
"""

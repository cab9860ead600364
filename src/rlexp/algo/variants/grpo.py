from rlexp.algo.algorithm import Algorithm

# Shao et al. 2024 (DeepSeekMath), arXiv:2402.03300: token-level ratio, group-scaled advantages.
ALGORITHM = Algorithm(name="grpo", reference="arXiv:2402.03300")

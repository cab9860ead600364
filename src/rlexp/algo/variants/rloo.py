from rlexp.algo.algorithm import Algorithm

# RLOO (Ahmadian et al. 2024, arXiv:2402.14740): leave-one-out baseline, GRPO's clipped loss.
ALGORITHM = Algorithm(name="rloo", reference="arXiv:2402.14740")

from rlexp.algo.algorithm import Algorithm

# Dr.GRPO (Liu et al. 2025, arXiv:2503.20783): GRPO's estimator; its changes are settings.
ALGORITHM = Algorithm(name="dr_grpo", reference="arXiv:2503.20783")

from rlexp.algo.algorithm import Algorithm

# DAPO (Yu et al. 2025, arXiv:2503.14476): GRPO's estimator; its changes are settings.
ALGORITHM = Algorithm(name="dapo", reference="arXiv:2503.14476")

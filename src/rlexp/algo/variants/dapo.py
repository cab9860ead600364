from rlexp.algo.algorithm import Algorithm

# Yu et al. 2025, arXiv:2503.14476: GRPO's estimator; clip-higher, token-mean, dynamic
# sampling and overlong shaping are settings (conf/algo/dapo.yaml).
ALGORITHM = Algorithm(name="dapo", reference="arXiv:2503.14476")

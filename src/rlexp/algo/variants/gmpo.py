from rlexp.algo.algorithm import Algorithm

# Geometric-Mean Policy Optimization (2025, arXiv:2507.20673): the sequence
# objective uses the geometric mean of the clipped token ratios (algo.loss: gmpo).
ALGORITHM = Algorithm(name="gmpo", reference="arXiv:2507.20673")

from rlexp.algo.algorithm import Algorithm

# GMPO (2025, arXiv:2507.20673): the geometric mean of the clipped token ratios.
ALGORITHM = Algorithm(name="gmpo", reference="arXiv:2507.20673")

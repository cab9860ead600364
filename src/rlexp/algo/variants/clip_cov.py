from rlexp.algo.algorithm import Algorithm

# Clip-Cov (Cui et al. 2025, arXiv:2505.22617): no gradient for a few high-covariance tokens.
ALGORITHM = Algorithm(name="clip_cov", reference="arXiv:2505.22617")

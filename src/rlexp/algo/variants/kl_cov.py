from rlexp.algo.algorithm import Algorithm

# KL-Cov (Cui et al. 2025, arXiv:2505.22617): a |log r| penalty on top-covariance tokens.
ALGORITHM = Algorithm(name="kl_cov", reference="arXiv:2505.22617")

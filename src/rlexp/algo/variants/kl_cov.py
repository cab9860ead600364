from rlexp.algo.algorithm import Algorithm

# KL-Cov (Cui et al. 2025, arXiv:2505.22617): a |log r| penalty on the top-covariance tokens,
# no clipping (algo.loss: kl_cov).
ALGORITHM = Algorithm(name="kl_cov", reference="arXiv:2505.22617")

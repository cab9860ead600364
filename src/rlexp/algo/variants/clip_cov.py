from rlexp.algo.algorithm import Algorithm

# Clip-Cov (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs",
# arXiv:2505.22617): cuts the gradient of a few high-covariance tokens (algo.loss: clip_cov).
ALGORITHM = Algorithm(name="clip_cov", reference="arXiv:2505.22617")

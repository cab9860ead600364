from rlexp.algo.algorithm import Algorithm

# Soft Adaptive Policy Optimization (arXiv:2511.20347): a sigmoid gate replaces the hard clip.
ALGORITHM = Algorithm(name="sapo", reference="arXiv:2511.20347")

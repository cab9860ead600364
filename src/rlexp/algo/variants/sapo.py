from rlexp.algo.algorithm import Algorithm

# Soft Adaptive Policy Optimization (2025, arXiv:2511.20347): a sigmoid gate of
# the ratio replaces the hard clip (algo.loss: sapo; conf/algo/sapo.yaml).
ALGORITHM = Algorithm(name="sapo", reference="arXiv:2511.20347")

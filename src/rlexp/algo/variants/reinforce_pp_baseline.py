from rlexp.algo.algorithm import Algorithm

# REINFORCE++-baseline (Hu et al. 2025, arXiv:2501.03262): the group mean subtracted, then
# whitened over the batch's tokens (algo.advantage: reinforce_pp_baseline).
ALGORITHM = Algorithm(name="reinforce_pp_baseline", reference="arXiv:2501.03262")

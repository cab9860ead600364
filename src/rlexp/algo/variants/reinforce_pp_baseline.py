from rlexp.algo.algorithm import Algorithm

# REINFORCE++-baseline (Hu et al. 2025, arXiv:2501.03262): the group mean out, then whitened.
ALGORITHM = Algorithm(name="reinforce_pp_baseline", reference="arXiv:2501.03262")

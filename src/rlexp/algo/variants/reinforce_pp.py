from rlexp.algo.algorithm import Algorithm

# REINFORCE++ (Hu et al. 2025, arXiv:2501.03262): rewards whitened over the batch's tokens.
ALGORITHM = Algorithm(name="reinforce_pp", reference="arXiv:2501.03262")

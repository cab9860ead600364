from rlexp.algo.algorithm import Algorithm

# GSPO (Zheng et al. 2025, arXiv:2507.18071): one length-normalized ratio per sequence.
ALGORITHM = Algorithm(name="gspo", reference="arXiv:2507.18071", ratio_level="sequence",
                      tunix_loss_algo="gspo-token")

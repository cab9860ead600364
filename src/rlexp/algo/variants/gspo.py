from rlexp.algo.algorithm import Algorithm

# Zheng et al. 2025, arXiv:2507.18071: one length-normalized sequence ratio per completion
# (the GSPO-token form, Tunix's loss_algo="gspo-token").
ALGORITHM = Algorithm(name="gspo", reference="arXiv:2507.18071", ratio_level="sequence",
                      tunix_loss_algo="gspo-token")

from rlexp.algo.algorithm import Algorithm

# Length-Unbiased Sequence Policy Optimization (arXiv:2602.05261; TRL 1.16 loss_type="luspo").
ALGORITHM = Algorithm(name="luspo", reference="arXiv:2602.05261", ratio_level="sequence",
                      tunix_loss_algo="gspo-token")

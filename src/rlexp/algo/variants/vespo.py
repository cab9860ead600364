from rlexp.algo.algorithm import Algorithm

# VESPO (arXiv:2602.10693; TRL 1.16 loss_type="vespo"): gamma-weighted REINFORCE on log pi.
ALGORITHM = Algorithm(name="vespo", reference="arXiv:2602.10693")

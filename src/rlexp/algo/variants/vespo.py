from rlexp.algo.algorithm import Algorithm

# VESPO (arXiv:2602.10693; TRL 1.16 loss_type="vespo"): REINFORCE on log pi weighted by a
# gamma-shaped, stop-gradient function of the sequence IS ratio (conf/algo/vespo.yaml).
ALGORITHM = Algorithm(name="vespo", reference="arXiv:2602.10693")

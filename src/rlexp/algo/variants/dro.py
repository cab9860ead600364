from rlexp.algo.algorithm import Algorithm

# Direct Reward Optimization (Richemond et al. 2024, arXiv:2405.19107) as verl 0.9.1 loss_mode
# "dro": REINFORCE on log pi with a quadratic log-ratio penalty instead of a clip.
ALGORITHM = Algorithm(name="dro", reference="arXiv:2405.19107")

from rlexp.algo.algorithm import Algorithm

# Liu et al. 2025 ("Understanding R1-Zero-like training"), arXiv:2503.20783: GRPO without the
# std in the advantage and without per-sequence length normalization; both are settings
# (scale_rewards: none, loss_agg: sequence-mean-token-scale in conf/algo/dr_grpo.yaml).
ALGORITHM = Algorithm(name="dr_grpo", reference="arXiv:2503.20783")

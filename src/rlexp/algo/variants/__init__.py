"""One module per algorithm, each defining ALGORITHM (see rlexp.algo.algorithm): grpo, gspo,
dapo, dr_grpo, cispo, sapo, gmpo, luspo, vespo, clip_cov, kl_cov, dro, rloo, reinforce_pp,
reinforce_pp_baseline."""

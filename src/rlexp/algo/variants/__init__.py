"""One module per algorithm, each defining ALGORITHM (see rlexp.algo.algorithm): grpo, gspo,
dapo, dr_grpo."""

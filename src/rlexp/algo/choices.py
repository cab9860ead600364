"""The algorithm's choices, spelled once: the maths branches on them and the config
validator offers them (rlexp.config.validate). JAX-free, so validation imports no JAX."""

from __future__ import annotations

# Per-token KL estimators (rlexp.algo.kl): k1 (log-ratio), k2 (squared / 2), k3 (Schulman's).
KL_ESTIMATORS = ("k1", "k2", "k3")
# Reductions of per-token losses over the completion mask (rlexp.algo.losses.aggregate).
LOSS_AGGREGATIONS = ("token-mean", "sequence-mean-token-mean", "sequence-mean-token-sum",
                     "sequence-mean-token-scale")
# Importance-ratio levels: per token (GRPO), per sequence (GSPO, TRL's form) or per sequence in
# the GSPO paper's token form (rlexp.algo.losses.importance_log_ratio).
RATIO_LEVELS = ("token", "sequence", "sequence_token")
# Advantage std scalings (TRL's scale_rewards, rlexp.algo.advantages).
REWARD_SCALES = ("group", "batch", "none")
# Policy-loss families (rlexp.algo.losses.per_token_loss; algo.loss): the clipped PPO/GRPO
# surrogate, CISPO, SAPO, GMPO, LUSPO, VESPO, Clip-Cov, KL-Cov and DRO.
LOSSES = ("ppo_clip", "cispo", "sapo", "gmpo", "luspo", "vespo", "clip_cov", "kl_cov", "dro")
# Advantage estimators (rlexp.algo.advantages; algo.advantage): group mean/std (GRPO),
# leave-one-out (RLOO), REINFORCE++ and REINFORCE++-baseline (token-level batch whitening).
ADVANTAGES = ("grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline")
# Estimators whose advantages depend on the completion mask (whitened over tokens).
TOKEN_LEVEL_ADVANTAGES = ("reinforce_pp", "reinforce_pp_baseline")
# Trainer/sampler mismatch corrections (rlexp.algo.rollout_correction; algo.rollout_correction):
# none, or TRL's vllm_importance_sampling_mode values.
ROLLOUT_CORRECTIONS = ("none", "token_truncate", "token_mask", "sequence_truncate",
                       "sequence_mask")
# Tunix's loss_algo labels an Algorithm may carry (Tunix 0.1.7 accepts these).
TUNIX_LOSS_ALGOS = ("grpo", "gspo-token")

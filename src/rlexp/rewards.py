"""The built-in reward functions under the names configs give them (`_target_:
rlexp.rewards.format_exact_reward`, ...); the code is rlexp.data.rewards."""

from rlexp.data.rewards import (answer_close_reward, answer_exact_reward, format_approx_reward,
                                format_exact_reward, math_verify_reward)

__all__ = ["answer_close_reward", "answer_exact_reward", "format_approx_reward",
           "format_exact_reward", "math_verify_reward"]

"""The shipped rollout backends by rollout.name: what the schema offers as its choices, apart
from the specs (which import the rules, which import the schema)."""

# Each name's RolloutSpec, imported when asked for (rlexp.config.rollouts.spec_class).
ROLLOUTS = {"vanilla": "rlexp.config.rollouts.vanilla.VanillaSpec",
            "vllm": "rlexp.config.rollouts.vllm.VllmSpec"}


def rollout_names() -> tuple[str, ...]:
    """The shipped backends' names (rollout.name's choices; a dotted path is valid too)."""
    return tuple(ROLLOUTS)

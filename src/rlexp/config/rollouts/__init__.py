"""Rollout backends, their Tunix-free half: one RolloutSpec per engine, chosen once by name
(no Tunix or JAX: rules, pre-flight checks, memory-plan share, the Python it runs in); its
`engine` names the engine half (an rlexp.engine.rollout.RolloutBackend). Shipped: vanilla, vllm
(vllm_tpu on a TPU); rollout.name may also be the dotted path of a user's RolloutSpec subclass.
No code outside a backend asks which engine runs: it asks `rollout_spec`."""

from __future__ import annotations

import functools
import os
import sys
from typing import TYPE_CHECKING, ClassVar, Optional, Sequence

from rlexp.base.errors import UserError
from rlexp.base.plugins import resolve
from rlexp.base.runtime import environment
from rlexp.config.rollouts.names import ROLLOUTS

if TYPE_CHECKING:
    from rlexp.config.refusal import Refusal
    from rlexp.config.schema import Config

# Set in the environment of a command re-run in a backend's Python: it never re-runs itself.
RERUN_ENV = "RLEXP_VLLM_RERUN"


class RolloutSpec:
    """A rollout backend's Tunix-free half; the defaults are Tunix's own sampler's."""

    engine: ClassVar[str]  # dotted path of the engine half, an rlexp.engine.rollout.RolloutBackend
    # Dotted path of its memory-plan share, fn(cfg, trainer bytes, rows a call) -> (rollout bytes
    # by item, VllmPlan or None).
    memory_share: ClassVar[str] = "rlexp.planning.memory.sampler_share"

    def on(self, platform: str) -> RolloutSpec:
        """The backend that runs this one on hardware.platform (vllm: vllm_tpu on a TPU)."""
        return self

    def shares_trainer_weights(self, cfg: Config) -> bool:
        """The sampler reads the trainer's very weights: never synced, no copy planned."""
        return False

    def gpu_share(self, cfg: Config) -> float:
        """The share of a GPU the engine takes outside JAX's preallocation."""
        return 0.0

    def parallelism_refusal(self, cfg: Config) -> Optional[Refusal]:
        """rollout.tensor/data_parallel_size against the rollout mesh (rules.py)."""
        return None

    def replicas_refusal(self, cfg: Config) -> Optional[Refusal]:
        """rollout.replicas > 1 where the engine cannot run them (rules.py)."""
        return None

    def lora_refusal(self, cfg: Config) -> Optional[Refusal]:
        """model.lora where the engine cannot sample with adapters (rules.py)."""
        return None

    def check(self, cfg: Config) -> None:
        """Pre-flight (rlexp.launch.checks): UserError when the engine cannot run here."""

    def python(self, cfg: Config) -> Optional[str]:
        """The Python the job must run in when this one cannot (rerun_elsewhere), else None."""
        return None

    def rerun_line(self, python: str) -> str:
        return f"running the command with {python}"


@functools.cache
def spec_class(name: str) -> type[RolloutSpec]:
    """The RolloutSpec subclass rollout.name names (UserError naming it when it is none)."""
    found = resolve(ROLLOUTS.get(name, name), "rollout.name", want_callable=False)
    if not (isinstance(found, type) and issubclass(found, RolloutSpec)):
        raise UserError(f"rollout.name={name!r}: not an rlexp.config.rollouts.RolloutSpec "
                        f"subclass (got {found!r})")
    return found


def rollout_spec(cfg: Config) -> RolloutSpec:
    """The backend cfg's rollouts run on: rollout.name's, on hardware.platform."""
    return spec_class(cfg.rollout.name)().on(cfg.hardware.platform)


def rerun_elsewhere(jobs: Sequence[Config], argv: Sequence[str]) -> None:
    """Re-run this command (os.execve) in the Python its jobs' backend needs when this one
    cannot run them (RolloutSpec.python); returns when they run here. Called after pre-flight
    composed every job and before anything is written."""
    needs: dict[str, RolloutSpec] = {}
    for job in jobs:
        spec = rollout_spec(job)
        python = spec.python(job)
        if python is not None:
            needs[python] = spec
    if len(needs) != 1:
        return  # none needs another Python (or two do: the pre-flight refused that)
    python, spec = needs.popitem()
    print(f"rlexp: {spec.rerun_line(python)}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os.execve(python, [python, "-m", "rlexp", *argv], {**environment(), RERUN_ENV: "1"})

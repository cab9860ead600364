"""The algorithm family: one module per algorithm in rlexp/algo/variants/, found by name.

An algorithm is a name (conf/algo/<name>.yaml holds its settings) plus what settings cannot
express: the default ratio level and the advantage estimator of algo.advantage=grpo. Adding one
= a module in variants/ defining `ALGORITHM = Algorithm(...)` + a YAML in conf/algo/; outside
rlexp, `algo.name` may be the dotted path of an Algorithm in the user's package.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np

from rlexp.algo import variants
from rlexp.algo.advantages import group_advantages
from rlexp.algo.choices import RATIO_LEVELS, TUNIX_LOSS_ALGOS
from rlexp.base.errors import UserError
from rlexp.base.plugins import resolve


def default_advantages(rewards: np.ndarray, group_size: int, scale: str) -> np.ndarray:
    return group_advantages(rewards, group_size, scale=scale)


@dataclass(frozen=True)
class Algorithm:
    # As algo.name spells it.
    name: str
    # Paper or reference, for --help and docs.
    reference: str
    # Importance-ratio level when algo.ratio_level is null: token | sequence.
    ratio_level: str = "token"
    # Tunix's loss_algo label (its own logs only; rlexp's registered loss does the maths).
    tunix_loss_algo: str = "grpo"
    # fn(rewards [B*G], group_size, algo.scale_rewards) -> advantages [B*G].
    advantages: Callable[[np.ndarray, int, str], np.ndarray] = default_advantages

    def __post_init__(self) -> None:
        for field, valid in (("ratio_level", RATIO_LEVELS), ("tunix_loss_algo", TUNIX_LOSS_ALGOS)):
            if getattr(self, field) not in valid:
                raise ValueError(f"Algorithm {self.name}: {field} must be {' or '.join(valid)}")


@lru_cache(maxsize=None)
def algorithms() -> dict[str, Algorithm]:
    """Every ALGORITHM of rlexp.algo.variants, by name."""
    found: dict[str, Algorithm] = {}
    for info in pkgutil.iter_modules(variants.__path__):
        module = importlib.import_module(f"{variants.__name__}.{info.name}")
        alg = getattr(module, "ALGORITHM", None)
        if isinstance(alg, Algorithm):
            found[alg.name] = alg
    return dict(sorted(found.items()))


def get(name: str) -> Algorithm:
    """A shipped algorithm by name, or a user's by dotted path ('mypkg.algos.RLOO')."""
    if name in algorithms():
        return algorithms()[name]
    found = resolve(name, "algo.name", want_callable=False)
    if not isinstance(found, Algorithm):
        raise UserError(f"algo.name={name!r}: not an rlexp.algo.algorithm.Algorithm "
                        f"(got {type(found).__name__})")
    return found

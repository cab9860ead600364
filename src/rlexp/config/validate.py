"""Validation of a Config: each field's range or choices (its `knob`) checked generically, then
the named cross-field rules; the first refusal is one line, `key=value is invalid: why`."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterator, Optional

from rlexp.base.errors import UserError
from rlexp.base.knobs import Valid, valid_of
from rlexp.config.refusal import Refusal
from rlexp.config.rules import RULES, epoch_steps, rollout_devices
from rlexp.config.schema import Config


def in_range(value: float, interval: str) -> bool:
    """value lies in `interval` ("[0, 1)", "(0, inf)", ...) and is finite."""
    if not math.isfinite(value):
        return False
    lo, hi = (float(bound) for bound in interval[1:-1].split(","))
    above = value >= lo if interval[0] == "[" else value > lo
    below = value <= hi if interval[-1] == "]" else value < hi
    return above and below


def knobs(section: Any, prefix: str = "") -> Iterator[tuple[str, Any, Valid, Any]]:
    """(dotted key, value, its Valid, the section holding it) of every field under the
    dataclass `section`, in schema order; a list field yields one per item (key.N, key.N.x)."""
    for f in dataclasses.fields(section):
        key, value = prefix + f.name, getattr(section, f.name)
        if dataclasses.is_dataclass(value):
            yield from knobs(value, key + ".")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if dataclasses.is_dataclass(item):
                    yield from knobs(item, f"{key}.{i}.")
                else:
                    yield f"{key}.{i}", item, valid_of(f), section
        else:
            yield key, value, valid_of(f), section


def choice_refusal(cfg: Config) -> Optional[Refusal]:
    """The first field whose value is not one of its choices."""
    for key, value, spec, section in knobs(cfg):
        if not spec.is_choice:
            continue
        valid = spec.values(section)
        if not valid or value in valid or (spec.null and value is None) or \
                (spec.dotted and isinstance(value, str) and "." in value):
            continue
        listed = ", ".join(valid) + (f", {spec.null}" if spec.null else "") + \
            (f", or {spec.dotted}" if spec.dotted else "")
        return Refusal(key, value, f"valid choices are {listed}")
    return None


def range_refusal(cfg: Config) -> Optional[Refusal]:
    """The first number outside its field's interval (None passes)."""
    for key, value, spec, _ in knobs(cfg):
        if spec.range and value is not None and not isinstance(value, bool) and \
                not in_range(value, spec.range):
            return Refusal(key, value, f"must be in {spec.range}")
    return None


def resolve_parallel_sizes(tp: int, dp: int, devices: int) -> tuple[int, int]:
    """vLLM's tensor and data parallel sizes, a -1 derived as Tunix 0.1.7 does
    (tunix/generate/utils.py resolve_parallelism_sizes): both -1 is TP = every rollout device,
    DP 1; one -1 is the devices over the other. A 0 stays for the rules to refuse."""
    if tp == -1 and dp == -1:
        return devices, 1
    if tp == -1 and dp > 0:
        return devices // dp, dp
    if dp == -1 and tp > 0:
        return tp, devices // tp
    return tp, dp


def validate(cfg: Config) -> Config:
    """The fields' choices (first: a bad hardware.gpu_type leaves the figures it selects at 0,
    which a range would blame), their ranges, then the rules: UserError for the first refusal.
    Between ranges and rules train.steps is derived from train.epochs, and a vLLM parallel
    size of -1 from the rollout devices."""
    for check in (choice_refusal, range_refusal):
        refusal = check(cfg)
        if refusal is not None:
            raise UserError(refusal.message)
    if cfg.train.epochs is not None:
        cfg.train.steps = epoch_steps(cfg.train.epochs, cfg.dataset.num_train, cfg.train.batch_size)
    r = cfg.rollout
    r.tensor_parallel_size, r.data_parallel_size = resolve_parallel_sizes(
        r.tensor_parallel_size, r.data_parallel_size, rollout_devices(cfg))
    for rule in RULES:
        refusal = rule.check(cfg)
        if refusal is not None:
            raise UserError(refusal.message)
    return cfg

"""A config value refused: the key it blames, the value and why, worded as one line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Refusal:
    # The dotted key the message blames, its value (shown as repr) and why ("must be >= 1").
    key: str
    value: Any
    why: str

    @property
    def message(self) -> str:
        return f"{self.key}={self.value!r} is invalid: {self.why}"

"""A config field declared once: `knob` makes a dataclass field whose metadata holds the values
it takes (a range or choices) beside its type and default; rlexp.config.validate reads them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Union


@dataclass(frozen=True)
class Valid:
    """The values a field takes (None, an Optional field left unset, passes the range)."""

    range: Optional[str] = None  # interval of a finite number, or of each in a list ("[1, inf)")
    # The valid values, in the order a refusal lists them, or a function returning them.
    choices: Union[tuple[str, ...], Callable[[], Iterable[str]]] = ()
    # Instead of `choices`: the keys of this dict field of the same section (when it has any).
    keys_of: Optional[str] = None
    null: Optional[str] = None  # also valid: null; a refusal words it "null (the algorithm's own)"
    # Also valid: a dotted import path, as a refusal words it ("a dotted path to fn(text)").
    dotted: Optional[str] = None

    @property
    def is_choice(self) -> bool:
        return bool(self.choices) or self.keys_of is not None

    def values(self, section: Any) -> tuple[str, ...]:
        """The valid choices of this field of `section` (an instance of its dataclass)."""
        if self.keys_of is not None:
            return tuple(sorted(getattr(section, self.keys_of)))
        return tuple(self.choices() if callable(self.choices) else self.choices)


def knob(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING,
         **valid: Any) -> Any:
    """A dataclass field of `default` (or `factory()`) taking the values Valid(**valid)."""
    return dataclasses.field(default=default, default_factory=factory,
                             metadata={"valid": Valid(**valid)})


def valid_of(field: dataclasses.Field) -> Valid:
    """The values `field` takes (Valid(): any of its type, for a field declared without knob)."""
    return field.metadata.get("valid", Valid())

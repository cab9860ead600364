"""Keep secrets (tokens, passwords, API keys) out of MLflow, run dirs and logs.

A key is secret when one of its words is a secret word, so `tracker.api_key` and `HF_TOKEN`
are secrets while `model.tokenizer` and `throughput/tokens_per_s` are not (a plain substring
test would hide the tokenizer choice). Secret *values* are then replaced wherever they appear:
the values of secret-named environment variables ($HF_TOKEN, ...) and of secret-named
`key=value` overrides on the command line.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MASK = "***"
# Words that make a key secret (compared word by word, case-insensitive).
SECRET_WORDS = frozenset({"token", "secret", "password", "passwd", "apikey", "credentials"})
# Word pairs that make a key secret: api_key, access_key, private_key, secret_key.
SECRET_PAIRS = frozenset({("api", "key"), ("access", "key"), ("private", "key")})
# Shorter values are not replaced inside free text ("1" would be masked everywhere); keys
# with secret names are masked whatever the length of their value.
MIN_SECRET_LEN = 6
# Files Hydra saves in <run dir>/.hydra/ that repeat the command line's overrides.
HYDRA_FILES = ("config.yaml", "overrides.yaml", "hydra.yaml")

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SPLIT = re.compile(r"[^a-z0-9]+")
# key=value in free text (an override, a query string); the value ends at a space or quote.
_ASSIGNMENT = re.compile(r"(?P<key>[+~]{0,2}[A-Za-z_][\w.\-/]*)(?P<sep>=|:\s*)(?P<value>[^\s,'\"]+)")


def _words(key: str) -> list[str]:
    return [w for w in _SPLIT.split(_CAMEL.sub("_", key).lower()) if w]


def is_secret_key(key: str) -> bool:
    """True for names like HF_TOKEN, tracker.api_key, db_password, mySecret."""
    words = _words(key)
    if any(w in SECRET_WORDS for w in words):
        return True
    return any(pair in SECRET_PAIRS for pair in zip(words, words[1:]))


def secret_values(argv: Iterable[str] | None = None) -> set[str]:
    """Values to hide: secret-named env vars and secret-named `key=value` arguments."""
    values = {v for k, v in os.environ.items() if is_secret_key(k)}
    for arg in sys.argv[1:] if argv is None else argv:
        key, sep, value = arg.partition("=")
        if sep and is_secret_key(key):
            values.add(value)
    return {v for v in values if len(v) >= MIN_SECRET_LEN}


def redact_text(text: str, extra: Iterable[str] = ()) -> str:
    """Mask secret values anywhere in `text`, and the value of any secret-named assignment."""
    for value in sorted(secret_values() | set(extra), key=len, reverse=True):
        if len(value) >= MIN_SECRET_LEN:
            text = text.replace(value, MASK)

    def mask(m: re.Match) -> str:
        return f"{m['key']}{m['sep']}{MASK}" if is_secret_key(m["key"]) else m[0]

    return _ASSIGNMENT.sub(mask, text)


def redact_value(key: str, value: Any) -> Any:
    """One param: masked when its key is secret; strings also scrubbed of secret values."""
    if is_secret_key(key) and value not in (None, ""):
        return MASK
    return redact_text(value) if isinstance(value, str) else value


def redact_obj(obj: Any, key: str = "") -> Any:
    """A JSON-like tree (summary, eval samples) with secrets masked at every level."""
    if isinstance(obj, dict):
        return {k: redact_obj(v, str(k)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v, key) for v in obj]
    return redact_value(key, obj) if key else (
        redact_text(obj) if isinstance(obj, str) else obj)


def redact_params(flat: dict[str, Any]) -> dict[str, Any]:
    """Flattened config {dotted key: value} -> the same with secrets masked."""
    return {k: redact_value(k, v) for k, v in flat.items()}


def _collect_secrets(node: Any, found: set[str], key: str = "") -> None:
    """Values of secret-named keys and `k=v` strings anywhere in a loaded YAML tree."""
    if isinstance(node, dict):
        for k, v in node.items():
            _collect_secrets(v, found, str(k))
    elif isinstance(node, list):
        for item in node:
            _collect_secrets(item, found, key)
    elif isinstance(node, str):
        if key and is_secret_key(key) and node:
            found.add(node)
        for m in _ASSIGNMENT.finditer(node):
            if is_secret_key(m["key"]):
                found.add(m["value"])


def scrub_run_dir(run_dir: Path) -> None:
    """Rewrite Hydra's saved config files in place so no secret value persists on disk."""
    import yaml  # PyYAML comes with hydra/omegaconf

    hydra_dir = Path(run_dir) / ".hydra"
    files = [hydra_dir / name for name in HYDRA_FILES if (hydra_dir / name).is_file()]
    found: set[str] = set()
    for path in files:
        try:
            _collect_secrets(yaml.safe_load(path.read_text()), found)
        except yaml.YAMLError:
            pass  # still scrubbed as text below
    for path in files:
        text = path.read_text()
        # Values found under secret keys are also masked where they reappear (override_dirname,
        # job name); short ones are masked only next to their key, by redact_text's assignments.
        scrubbed = redact_text(text, extra=found)
        if scrubbed != text:
            tmp = path.with_suffix(path.suffix + ".tmp")
            tmp.write_text(scrubbed)
            tmp.replace(path)

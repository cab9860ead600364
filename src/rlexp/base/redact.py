"""Keep secrets (tokens, passwords, API keys, signed URLs) out of MLflow, run dirs and logs. Masked
wherever rlexp writes, and taken out of the command line before Hydra saves it (mask_argv): URI
credentials (`postgresql://user:PW@host`, `?token=`, `&sig=`), the value of a secret-named key
(`tracker.api_key=...`, `Authorization: Bearer ...`) wherever it reappears, and the values of
secret-named environment variables ($HF_TOKEN, ...). A key is secret when its LAST word is a secret
word (or its last two words a secret pair): `HF_TOKEN`, `AWS_SECRET_ACCESS_KEY` are; `token_budget`,
`eval/token_accuracy`, `model.tokenizer` are not (a test on any word or substring would hide them
from the store)."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode

from rlexp.base.files import MULTIRUN_FILE, write_atomic
from rlexp.base.runtime import environment

MASK = "***"
# Last words that make a key secret (compared whole, case-insensitive).
SECRET_WORDS = frozenset({
    "token", "secret", "password", "passwd", "pwd", "passphrase", "passkey", "apikey",
    "credential", "credentials", "authorization", "bearer", "cookie", "signature", "sig",
    "privatekey", "accesskey", "secretkey", "sas"})
# Last two words that make a key secret: api_key, access_key, private_key, secret_key, ...
SECRET_PAIRS = frozenset({("api", "key"), ("access", "key"), ("private", "key"),
                          ("secret", "key"), ("account", "key"), ("master", "key"),
                          ("client", "secret"), ("session", "token"), ("set", "cookie")})
# A key that is exactly one of these words is secret (`?key=...` of Google APIs, `?code=`
# of OAuth redirects); as the last word of a longer name they are ordinary (`dataset.key`).
SECRET_ALONE = frozenset({"key", "code", "auth"})
# Whole names that look secret but are not: the shell's $PWD is the working directory (masking
# its value hid every path under the cwd), while `db_pwd` stays a secret.
NOT_SECRET = frozenset({"pwd"})
# Shorter values are not replaced inside free text ("1" would be masked everywhere); keys
# with secret names are masked whatever the length of their value.
MIN_SECRET_LEN = 6

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SPLIT = re.compile(r"[^a-z0-9]+")
# A URI with an authority: scheme://[userinfo@]host[/path][?query][#fragment].
_URI = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<rest>[^\s'\"<>,]*)")
# key=value in free text (an override, a query string, a header). The ':' separator must not
# start a '://' (a URI); the value ends at a space, quote, comma, '&' or ';'.
_ASSIGNMENT = re.compile(r"(?P<key>[+~]{0,2}[A-Za-z_][\w.\-/]*)(?P<sep>=|:(?!//)\s*)"
                         r"(?P<value>[^\s,'\"&;]+)")
# `Authorization: Basic <b64>` and `Bearer <token>` (an HTTP header repeated in text).
_AUTH_SCHEME = re.compile(r"(?i)(?P<head>\b(?:proxy-)?authorization\s*[:=]\s*(?:[A-Za-z]+\s+)?"
                          r"|\bBearer\s+)(?P<value>[^\s'\",;]{6,})")


def _words(name: str) -> list[str]:
    return [w for w in _SPLIT.split(_CAMEL.sub("_", name).lower()) if w]


def is_secret_key(key: str) -> bool:
    """Whether `key` names a secret, by its last word(s) (see the module docstring)."""
    last = re.split(r"[./]", str(key).lstrip("+~"))[-1]  # the leaf of a dotted/slashed path
    words = _words(last)
    if not words or "_".join(_words(str(key))) in NOT_SECRET:
        return False
    if len(_words(str(key))) == 1 and words[0] in SECRET_ALONE:
        return True
    return words[-1] in SECRET_WORDS or tuple(words[-2:]) in SECRET_PAIRS


def _mask_query(query: str, found: set[str] | None, replace: Callable[[str], str]) -> str:
    parts = []
    for item in query.split("&"):
        name, sep, value = item.partition("=")
        if sep and value and is_secret_key(unquote(name)):
            if found is not None:
                found.update({value, unquote(value)})
            value = replace(value)
        parts.append(f"{name}{sep}{value}")
    return "&".join(parts)


def redact_uri(uri: str, found: set[str] | None = None,
               replace: Callable[[str], str] | None = None) -> str:
    """Mask the credentials of every URI in `uri`; `found` collects the raw secret values (to mask
    other copies), `replace(secret)` gives the text put in its place (default MASK)."""
    masked = replace or (lambda _secret: MASK)

    def one(m: re.Match) -> str:
        rest = m["rest"]
        # Punctuation that ends a sentence, not the URI ("store http://h/?token=T: down").
        end = len(rest.rstrip(".:;)]"))
        rest, after = rest[:end], rest[end:]
        authority = re.match(r"[^/?#]*", rest)[0]  # up to the path, query or fragment
        tail = rest[len(authority):]
        if "@" in authority:
            userinfo, host = authority.rsplit("@", 1)
            user, colon, password = userinfo.partition(":")
            secret = password if colon else user
            if found is not None and secret:
                found.update({secret, unquote(secret)})
            authority = f"{user}:{masked(password)}@{host}" if colon else f"{masked(user)}@{host}"
        if "?" in tail:
            path, _, query = tail.partition("?")
            query, hash_, fragment = query.partition("#")
            tail = f"{path}?{_mask_query(query, found, masked)}{hash_}{fragment}"
        return f"{m['scheme']}{authority}{tail}{after}"

    return _URI.sub(one, uri)


# Secrets learned from what this process was given (a tracking URI, a job's overrides), counted
# by secret_values() though no env var or argument holds them (a worker's pickled tracker.uri).
_learned: set[str] = set()


def remember(*texts: str | None) -> None:
    """Count URI credentials and secret-named `key=value` values in `texts` as this process's
    secrets: every later masked line masks them too, in any form (a URI cut short, decoded)."""
    found: set[str] = set()
    for text in texts:
        if isinstance(text, str):
            _collect_secrets(text, found)  # URI credentials, secret-named `k=v`s inside it
            key, sep, value = text.partition("=")
            if sep and is_secret_key(key):
                found.add(value)
    new = {v for v in found if len(v) >= MIN_SECRET_LEN} - _learned  # MASK is shorter
    if new:
        _learned.update(new)
        install_log_redaction()


# Hydra saves the overrides (.hydra/*.yaml, multirun.yaml, submitit's pickles) before any job or
# callback runs: masked later, they stay in clear if the command stops first. So mask_argv puts a
# placeholder (`***1***`) in the override, the values travel in SECRETS_ENV (base64 JSON) and each
# job puts them back (unmask_config, unmask; store.resolve_uri).
SECRETS_ENV = "RLEXP_MASKED_SECRET"
_PLACEHOLDER = re.compile(r"\*\*\*\d+\*\*\*")


def masked_secrets() -> dict[str, str]:
    """{placeholder: real value} handed down by mask_argv (empty when none)."""
    raw = os.environ.get(SECRETS_ENV)
    try:
        table = json.loads(base64.urlsafe_b64decode(raw.encode())) if raw else {}
    except ValueError:  # binascii.Error and JSON errors are ValueErrors
        return {}
    items = table.items() if isinstance(table, dict) else ()
    return {k: v for k, v in items if isinstance(k, str) and isinstance(v, str)}


def mask_argv(argv: list[str]) -> list[str]:
    """argv with each secret replaced by a placeholder, the real values put in SECRETS_ENV: URI
    credentials (`tracker.uri=http://u:PW@host` -> `http://u:***1***@host`, `?token=`) and
    secret-named keys' values (`+hydra.job.env_set.HF_TOKEN=hf_x` -> `***2***`; each value of a
    sweep `a,b` alone). The same command gives the same placeholders (run dirs are named so)."""
    table = masked_secrets()
    by_value = {v: k for k, v in table.items()}

    def placeholder(secret: str) -> str:
        if _PLACEHOLDER.fullmatch(secret) or secret == MASK or not secret:
            return secret
        if secret not in by_value:
            name = f"***{len(table) + 1}***"
            table[name], by_value[secret] = secret, name
        return by_value[secret]

    def value(text: str) -> str:
        quote = text[:1]
        if len(text) >= 2 and quote in "'\"" and text.endswith(quote):
            return f"{quote}{placeholder(text[1:-1])}{quote}"
        return ",".join(placeholder(part) for part in text.split(","))

    out = []
    for arg in argv:
        key, sep, val = arg.partition("=")
        if arg.startswith("-") or not sep:
            out.append(arg)
        elif is_secret_key(key):
            out.append(f"{key}={value(val)}")
        else:
            out.append(redact_uri(arg, replace=placeholder) if "://" in arg else arg)
    if table:  # one word (base64): a printed `--env NAME=VALUE` masks it whole
        os.environ[SECRETS_ENV] = base64.urlsafe_b64encode(json.dumps(table).encode()).decode()
    return out


def unmask(text: str) -> str:
    """text with mask_argv's placeholders back to the real values (unknown ones left)."""
    table = masked_secrets()
    if not table or "***" not in text:
        return text
    return _PLACEHOLDER.sub(lambda m: table.get(m[0], m[0]), text)


def placeholders(text: str) -> str:
    """URI credentials masked for a file: mask_argv's placeholders where it made one, else MASK."""
    by_value = {v: k for k, v in masked_secrets().items()}
    return redact_uri(text, replace=lambda s: s if _PLACEHOLDER.fullmatch(s)
                      else by_value.get(s, MASK))


def unmask_config(cfg: Any) -> None:
    """A job's composed config (DictConfig), in place: placeholders back to real values."""
    from omegaconf import OmegaConf, flag_override
    if not masked_secrets():
        return

    def walk(raw: Any, node: Any) -> None:
        for key, value in raw.items() if isinstance(raw, dict) else enumerate(raw):
            if isinstance(value, str) and _PLACEHOLDER.search(value):
                node[key] = unmask(value)
            elif isinstance(value, (dict, list)):
                walk(value, node[key])

    with flag_override(cfg, ["readonly", "struct"], False):
        # The unresolved values (resolve=False): an interpolation stays as written.
        walk(OmegaConf.to_container(cfg, resolve=False), cfg)


def secret_values() -> set[str]:
    """Values to hide: secret-named env vars and `key=value` arguments, the credentials of URIs in
    either (MLFLOW_TRACKING_URI=https://u:PW@host, tracker.uri=...), what remember() learned."""
    found: set[str] = set(_learned) | set(masked_secrets().values())
    for k, v in environment().items():
        if is_secret_key(k) and k != SECRETS_ENV:  # SECRETS_ENV's values: counted one by one
            found.add(v)
        elif "://" in v:
            redact_uri(v, found)
    for arg in sys.argv[1:]:
        key, sep, value = arg.partition("=")
        if sep and is_secret_key(key):
            found.add(value)
        if "://" in arg:
            redact_uri(arg, found)
    return {v for v in found if len(v) >= MIN_SECRET_LEN}


def redact_text(text: str, extra: Iterable[str] = (), values: set[str] | None = None) -> str:
    """Mask URI credentials, secret assignments and `values` (secret_values()) in `text`."""
    text = redact_uri(text)
    known = secret_values() if values is None else values
    for value in sorted(known | set(extra), key=len, reverse=True):
        if len(value) >= MIN_SECRET_LEN:
            text = text.replace(value, MASK)

    def mask(m: re.Match) -> str:
        if not is_secret_key(m["key"]):
            return m[0]
        value = m["value"]
        end = len(value.rstrip(".:;)]")) or len(value)  # a sentence's punctuation stays
        return m[0] if value[:end] == MASK else f"{m['key']}{m['sep']}{MASK}{value[end:]}"

    text = _AUTH_SCHEME.sub(lambda m: f"{m['head']}{MASK}", text)
    return _ASSIGNMENT.sub(mask, text)


_current: tuple[Any, set[str]] | None = None


def current_secrets() -> set[str]:
    """secret_values(), recomputed only on a change (an environment scan costs ~0.2 ms a line)."""
    global _current
    key = (len(_learned), tuple(sys.argv), hash(frozenset(environment().items())))
    if _current is None or _current[0] != key:
        _current = (key, secret_values())
    return _current[1]


class RedactedStream:
    """A text stream masking secrets written to it (`--cfg job` prints the composed config): this
    process's secrets at each write (current_secrets), so ones learned later count."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # not ours to judge (bytes on a binary stream)
            return self.stream.write(text)
        self.stream.write(redact_text(text, values=current_secrets()))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, encoding, ...
        return getattr(self.stream, name)


def redact_value(key: str, value: Any, values: set[str] | None = None) -> Any:
    """One param: masked when its key is secret; strings also scrubbed of secret values."""
    if is_secret_key(key) and value not in (None, ""):
        return MASK
    return redact_text(value, values=values) if isinstance(value, str) else value


def redact_obj(obj: Any, key: str = "", values: set[str] | None = None) -> Any:
    """A JSON-like tree with secrets masked at every level, scanning the environment once."""
    values = secret_values() if values is None else values
    if isinstance(obj, dict):
        return {k: redact_obj(v, str(k), values) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v, key, values) for v in obj]
    return redact_value(key, obj, values)  # key "" is no secret: strings are scrubbed


def redact_params(flat: dict[str, Any]) -> dict[str, Any]:
    """Flattened config {dotted key: value} -> the same with secrets masked. A value can still
    be a list of dicts (flatten stops at lists: reward.functions' kwargs), masked inside too."""
    values = secret_values()
    return {k: redact_obj(v, k, values) for k, v in flat.items()}


def _collect_secrets(node: Any, found: set[str], key: str = "") -> None:
    """Values of secret-named keys, `k=v` strings and URI credentials in a loaded YAML tree."""
    if isinstance(node, dict):
        for k, v in node.items():
            _collect_secrets(v, found, str(k))
    elif isinstance(node, list):
        for item in node:
            _collect_secrets(item, found, key)
    elif isinstance(node, str):
        if key and is_secret_key(key) and node:
            found.add(node)
        found.update(m["value"] for m in _ASSIGNMENT.finditer(node) if is_secret_key(m["key"]))
        redact_uri(node, found)


def scrub_files(paths: Iterable[Path]) -> None:
    """Rewrite YAML files Hydra saved so no secret value persists on disk (atomic, in place)."""
    files = [Path(p) for p in paths if Path(p).is_file()]
    found: set[str] = set()
    for path in files:
        with contextlib.suppress(yaml.YAMLError, OSError):  # still scrubbed as text below
            _collect_secrets(yaml.safe_load(path.read_text()), found)
    for path in files:
        text = path.read_text()
        # Values found under secret keys are also masked where they reappear (override_dirname,
        # job name); short ones are masked only next to their key, by redact_text's assignments.
        if (scrubbed := redact_text(text, extra=found)) != text:
            write_atomic(path, scrubbed)


def scrub_run_dir(run_dir: Path) -> None:
    """The files Hydra saves in <run dir>/.hydra/ that repeat the command line's overrides."""
    hydra_dir = Path(run_dir) / ".hydra"
    scrub_files(hydra_dir / name for name in ("config.yaml", "overrides.yaml", "hydra.yaml"))


def scrub_sweep_dir(sweep_dir: Path) -> None:
    """The sweep's multirun.yaml (`+hydra.job.env_set.HF_TOKEN=...` in clear)."""
    scrub_files([Path(sweep_dir) / MULTIRUN_FILE])


class ScrubCallback(Callback):  # listed in conf/config.yaml
    """Masks secrets in the files Hydra writes, right after it writes them: a job's .hydra/
    (before on_job_start) and the sweep's multirun.yaml (before any job starts, and at its end)."""

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        hc = HydraConfig.get()
        remember(*hc.overrides.task)  # pickled for a launcher's worker, not in its argv
        for name, value in (hc.job.env_set or {}).items():  # set by Hydra just before
            if isinstance(value, str) and _PLACEHOLDER.search(value):
                os.environ[str(name)] = unmask(value)
        install_log_redaction()
        scrub_run_dir(Path(hc.runtime.output_dir))
        if hc.mode == RunMode.MULTIRUN:
            scrub_sweep_dir(Path(hc.sweep.dir))

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        scrub_sweep_dir(Path(config.hydra.sweep.dir))


_factory_installed = False


def install_log_redaction() -> None:
    """Mask secrets in logs, warnings and stdout/stderr once a secret is known; idempotent."""
    global _factory_installed
    if _factory_installed or not secret_values():
        return
    _factory_installed = True
    base = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = base(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a record that cannot format is left to logging's own handling
            return record
        values = current_secrets()
        masked = redact_text(message, values=values)
        if masked != message:
            record.msg, record.args = masked, ()
        if record.exc_info and record.exc_info[0] is not None:  # formatted once, masked
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text = redact_text(text, values=values)
        return record

    logging.setLogRecordFactory(factory)
    show = warnings.showwarning

    def showwarning(message: Any, category: Any, filename: str, lineno: int,
                    file: Any = None, line: str | None = None) -> None:
        text = str(message)
        masked = redact_text(text, values=current_secrets())
        show(masked if masked != text else message, category, filename, lineno, file, line)

    warnings.showwarning = showwarning
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, RedactedStream):
            setattr(sys, name, RedactedStream(stream))

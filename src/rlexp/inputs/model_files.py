"""Model inputs that need no Tunix: model.path checks, config.json agreement, tokenizers. The
architecture numbers in conf/model/*.yaml (they size the plan) must agree with model.path's
config.json; rlexp.engine.tunix_models builds the Tunix model."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from rlexp.base.errors import UserError
from rlexp.base.plugins import first_line
from rlexp.config.schema import ModelConfig
from rlexp.families import families, get
from rlexp.inputs.smollm2 import ensure_converted
from rlexp.inputs.sources import check, fetch, parse
from rlexp.inputs.tokenizer import MIN_VOCAB, CharTokenizer

# transformers (2.0 s) is imported in build_tokenizer only: the char tokenizer needs none.

log = logging.getLogger(__name__)


def model_dir(m: ModelConfig) -> Path | None:
    """model.path as a checked dir with config.json and *.safetensors; None for random init."""
    if m.path is None:
        return None
    path = Path(m.path).expanduser()
    if not path.is_dir():
        raise UserError(f"model.path={m.path}: directory not found")
    if not (path / "config.json").is_file():
        raise UserError(f"model.path={m.path}: no config.json (need a Hugging Face checkpoint dir)")
    if not any(path.glob("*.safetensors")):
        raise UserError(f"model.path={m.path}: no *.safetensors weights in the directory")
    return path


def check_hf_config(m: ModelConfig, path: Path) -> dict[str, Any]:
    """config.json must be of model.family (Tunix's loader skips unknown keys: a wrong family
    loads silently), run on Tunix's model, and match the YAML's architecture."""
    try:
        hf = json.loads((path / "config.json").read_text())
    except ValueError as exc:
        raise UserError(f"model.path={m.path}: config.json is not valid JSON ({exc})") from None
    family = get(m.family)
    model_type = str(hf.get("model_type", ""))
    if model_type and model_type not in family.model_types:
        fits = [f.name for f in families().values() if model_type in f.model_types]
        raise UserError(f"model.family={m.family} but {path}/config.json has "
                        f"model_type={model_type}; valid choices are {', '.join(fits) or 'none'}")
    family.check_hf(m, hf, str(path))
    return hf


def build_tokenizer(m: ModelConfig) -> Any:
    """CharTokenizer (tokenizer=char) or a Hugging Face tokenizer from model.path."""
    if m.tokenizer == "char":
        if m.vocab_size < MIN_VOCAB:
            raise UserError(f"model.vocab_size={m.vocab_size}: the char tokenizer needs "
                            f">= {MIN_VOCAB}")
        return CharTokenizer(m.vocab_size)
    if m.path is None:
        raise UserError("model.tokenizer=hf needs model.path=<dir with tokenizer.json>")
    path = Path(m.path).expanduser()
    if not (path / "tokenizer.json").is_file() and not (path / "tokenizer.model").is_file():
        raise UserError(f"model.path={m.path}: no tokenizer.json (needed by model.tokenizer=hf)")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers import AutoTokenizer
    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:
        raise UserError(f"model.path={m.path}: cannot load the tokenizer "
                        f"({type(exc).__name__}: {first_line(exc)[:120]})") from None


# Profiles whose weights come with a package when model.path is null (resolve_path).
PACKAGED_MODELS = ("smollm2-135m",)


def resolve_path(m: ModelConfig, cache_dir: str) -> None:
    """model.path as a local dir: packaged models converted, hub ids and URLs downloaded, once."""
    if m.path is None and m.name in PACKAGED_MODELS:
        m.path = str(ensure_converted(cache_dir))
    elif m.path is not None and parse(m.path).kind != "local":
        log.info("model.path=%s: reading the weights from %s", m.path,
                 fetched := fetch(m.path, cache_dir))
        m.path = str(fetched)


def check_model(m: ModelConfig, cache_dir: str) -> None:
    """Pre-flight of model.path (no download): a local dir's files, a cached hub snapshot's
    config.json; an uncached hub id fails only offline, a bucket needs its backend."""
    if m.path is None:  # random init is for the tiny profile; packaged models find theirs
        if m.name not in PACKAGED_MODELS and (m.tokenizer == "hf" or not get(m.family).random_init):
            raise UserError(f"model={m.name} needs model.path (a local Hugging Face dir, a hub "
                            "id or a gs:// path): random init is only for the tiny model")
        return
    if parse(m.path).kind == "local":
        model_dir(m)
        return
    cached = check(m.path, cache_dir)
    if cached is not None and (cached / "config.json").is_file():
        check_hf_config(m, cached)

"""Export a run's policy as a Hugging Face model dir, and find the weights a fork starts from.
`python -m rlexp.export <run dir | checkpoint dir | MLflow run id> [--out DIR]` writes
model.safetensors (sharded past 4 GiB), config.json and the tokenizer files, as `transformers`
and `model.path=DIR` read them; a run does the same at its end (run.export) and logs it to
MLflow as artifact `model`. The parameter mapping is the family's (`ModelFamily.to_hf_weights`,
the inverse of tunix/models/<family>/params*.py)."""

from __future__ import annotations

import json
import logging
import re
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from rlexp.base.errors import OneLineParser, UserError, fail
from rlexp.base.files import replace
from rlexp.config.convert import one_line_omegaconf_error
from rlexp.config.schema import Config, ModelConfig
from rlexp.config.validate import choice_refusal
from rlexp.engine import lora
from rlexp.engine.weights import assign, flatten, params
from rlexp.families import get
from rlexp.families.family import tunix_key
from rlexp.inputs import storage
from rlexp.inputs.model_files import resolve_path
from rlexp.inputs.tokenizer import ALPHABET, BOS, EOS, PAD, _SPECIALS
from rlexp.tracking import default_uri
from rlexp.tracking.spool import Link
from rlexp.tracking.store import client, resolve_uri

# Imported inside functions, on purpose: safetensors, tokenizers and orbax (3.1 s) are imported
# where an export or an init_from needs them: pre-flight imports this module to find a checkpoint.

log = logging.getLogger("rlexp")

EXPORT_DIR = "export"
# `python -m rlexp.export RUN --adapters-only`: a LoRA run's adapters (PEFT layout).
ADAPTERS_DIR = "export_adapters"
SHARD_BYTES = 4 << 30
# Tokenizer and generation files copied from model.path when the model came from one.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json",
                   "chat_template.jinja", "generation_config.json")
_MLFLOW_RUN_ID = re.compile(r"^[0-9a-f]{32}$")


def to_hf(flat: dict[str, np.ndarray], m: ModelConfig) -> dict[str, np.ndarray]:
    """Tunix parameters (dotted or orbax names) -> Hugging Face state dict (numpy)."""
    return get(m.family).to_hf_weights(flat, m)


def write(out: Path, flat: dict[str, np.ndarray], m: ModelConfig, source: Path | None) -> Path:
    """The HF dir `out` (replaced whole): weights, config.json, tokenizer (reusing model.path's);
    a LoRA policy merged, or with model.lora.adapters_only as PEFT adapters alone."""
    if lora.has_adapters(flat):
        if m.lora.adapters_only:
            return lora.write_adapters(out, flat, m)
        flat = lora.merge(flat, m.lora.alpha, m.lora.rank)
    weights = to_hf(flat, m)
    # what the tensors are (float32 master weights under bf16 compute stay float32)
    dtype = "bfloat16" if any(w.dtype.name == "bfloat16" for w in weights.values()) else "float32"
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _save_weights(tmp, weights)
    # the source's config.json (training leaves the architecture), with the export dtype
    base = None
    if source is not None and (source / "config.json").is_file():
        base = json.loads((source / "config.json").read_text())
    config = get(m.family).hf_config(m, dtype, base)
    if base is None and m.tokenizer == "char":
        config.update(bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    if m.tokenizer == "char":
        write_char_tokenizer(tmp, m.vocab_size)
    elif source is not None:
        for name in TOKENIZER_FILES:
            if (source / name).is_file():
                shutil.copy2(source / name, tmp / name)
    if out.exists():
        shutil.rmtree(out)
    replace(tmp, out)
    return out


def _save_weights(out: Path, weights: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file

    meta = {"format": "pt"}  # transformers refuses files without it
    shards: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for key in sorted(weights):
        nbytes = weights[key].nbytes
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append({})
            size = 0
        shards[-1][key] = weights[key]
        size += nbytes
    if len(shards) == 1:
        save_file(shards[0], str(out / "model.safetensors"), metadata=meta)
        return
    index: dict[str, Any] = {"metadata": {"total_size": sum(w.nbytes for w in weights.values())},
                             "weight_map": {}}
    for n, shard in enumerate(shards, 1):
        name = f"model-{n:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(out / name), metadata=meta)
        index["weight_map"].update({k: name for k in shard})
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def write_char_tokenizer(out: Path, vocab_size: int) -> None:
    """rlexp's character tokenizer as a merge-less `tokenizers` BPE (same ids) with its
    tokenizer_config.json, written without importing transformers (1.2 s per tiny run)."""
    from tokenizers import Tokenizer, decoders, models

    specials = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>",
                "unk_token": "<unk>"}
    assert len(specials) == _SPECIALS
    vocab = {tok: i for i, tok in enumerate(specials.values())}
    vocab.update({ch: i + _SPECIALS for i, ch in enumerate(ALPHABET)})
    vocab.update({f"<extra_{i}>": i for i in range(len(vocab), vocab_size)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(list(specials.values()))
    tok.save(str(out / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1 << 30,
              "clean_up_tokenization_spaces": False, **specials}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def find_checkpoint(spec: str, tracking_uri: str | None = None) -> Path:
    """<run dir | checkpoint dir | MLflow run id> -> the step dir of its newest checkpoint."""
    path = Path(spec).expanduser()
    if not path.exists() and _MLFLOW_RUN_ID.match(spec):
        try:
            run = client(resolve_uri(tracking_uri)).get_run(spec)
        except Exception as exc:
            raise UserError(f"run.init_from={spec}: no such MLflow run at "
                            f"{resolve_uri(tracking_uri)} ({type(exc).__name__})") from None
        run_dir = run.data.tags.get("rlexp.run_dir")
        if not run_dir:
            raise UserError(f"run.init_from={spec}: the MLflow run has no rlexp.run_dir tag")
        path = Path(run_dir)
    if (path / "model_params").is_dir():
        return path
    for ckpts in (path / "checkpoints", path, *_remote_checkpoints(path)):
        steps = [int(p.name) for p in ckpts.glob("*") if p.name.isdigit()
                 and (p / "model_params").is_dir()] if ckpts.is_dir() else []
        if steps:
            return ckpts / str(max(steps))
    raise UserError(f"run.init_from={spec}: no checkpoint found (pass a run dir with "
                    f"checkpoints/, a checkpoint dir, or an MLflow run id)")


def _remote_checkpoints(run_dir: Path) -> list[Any]:
    """A run made with run.output_uri keeps its checkpoints at <uri>/<run name>/checkpoints."""
    try:
        saved = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    except (OSError, ValueError):
        return []
    uri = OmegaConf.select(saved, "run.output_uri", default=None)
    return [storage.checkpoint_dir(uri, run_dir, run_dir.name)] if uri else []


def run_dir_of(checkpoint: Path) -> Path:
    """<run dir>/checkpoints/<step> -> <run dir>."""
    return checkpoint.parent.parent


def load_checkpoint(checkpoint: Path) -> dict[str, np.ndarray]:
    """An orbax step dir's policy parameters as dotted-name numpy arrays (host only, no mesh)."""
    import orbax.checkpoint as ocp

    with warnings.catch_warnings():  # "sharding info not provided": host arrays are wanted
        warnings.simplefilter("ignore")
        where = checkpoint / "model_params"  # a bucket path (run.output_uri) as it is
        tree = ocp.PyTreeCheckpointer().restore(str(where if "://" in str(where)
                                                    else Path(where).absolute()))
    return {tunix_key(k): np.asarray(v) for k, v in flatten(tree).items()}


def run_model(run_dir: Path) -> tuple[ModelConfig, str]:
    """A run dir's model section and run.cache_dir only, so older rlexp runs still export."""
    path = run_dir / ".hydra" / "config.yaml"
    if not path.is_file():
        raise UserError(f"{run_dir}: no .hydra/config.yaml (not an rlexp run dir)")
    saved = OmegaConf.load(path)
    try:
        model = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig),
                                                    saved.get("model", {})))
    except Exception as exc:
        raise UserError(f"{path}: model section: {one_line_omegaconf_error(exc)}") from None
    refusal = choice_refusal(Config(model=model))  # model.family: one this rlexp knows
    if refusal is not None:
        raise UserError(f"{path}: {refusal.message}")
    cache_dir = OmegaConf.select(saved, "run.cache_dir", default=None) or "outputs/cache"
    return model, str(cache_dir)


def init_model(model: Any, flat: dict[str, np.ndarray], origin: str) -> None:
    """Set an nnx model's parameters from a checkpoint's (same names and shapes)."""
    for key, value in params(model, sep=".").items():
        theirs = flat.get(key)
        if theirs is None or tuple(theirs.shape) != tuple(value.shape):
            got = "missing" if theirs is None else f"shape {tuple(theirs.shape)}"
            raise UserError(f"run.init_from={origin}: parameter {key} is {got} in the origin, "
                            f"{tuple(value.shape)} here; the model config must match the origin's")
    assign(model, flat, sep=".")


def init_from(cfg: Any, model: Any) -> dict[str, str]:
    """run.init_from: load the origin's newest checkpoint into `model` (origin only read)."""
    checkpoint = find_checkpoint(cfg.run.init_from, default_uri(cfg))
    init_model(model, load_checkpoint(checkpoint), cfg.run.init_from)
    log.info("run.init_from=%s: starting from %s", cfg.run.init_from, checkpoint)
    where = str(checkpoint) if "://" in str(checkpoint) else str(Path(checkpoint).absolute())
    return {"init_from": where}


def export_run(spec: str, out: Path | None = None, tracking_uri: str | None = None,
               adapters_only: bool = False) -> Path:
    """`python -m rlexp.export`: a run's newest checkpoint as an HF dir (LoRA: `adapters_only`)."""
    checkpoint = find_checkpoint(spec, tracking_uri)
    given = Path(spec).expanduser()
    # the run dir when given (its checkpoints may be on a bucket), else <run>/checkpoints/<step>
    run_dir = given if (given / ".hydra").is_dir() else run_dir_of(checkpoint)
    model, cache_dir = run_model(run_dir)
    model.lora.adapters_only = model.lora.adapters_only or adapters_only
    resolve_path(model, cache_dir)
    source = Path(model.path) if model.path else None
    flat = load_checkpoint(checkpoint)
    if model.lora.rank and not model.lora.adapters_only:  # the checkpoint has no base weights
        raise UserError(f"{checkpoint}: a LoRA checkpoint holds only the adapters; export "
                        f"them with --adapters-only (PEFT layout), or use the merged model "
                        f"the run wrote at its end ({run_dir / EXPORT_DIR})")
    out = write(out or run_dir / (ADAPTERS_DIR if adapters_only else EXPORT_DIR), flat, model,
                source)
    _log_to_mlflow(run_dir, out)
    return out


def _log_to_mlflow(run_dir: Path, out: Path) -> None:
    """The export as artifact `model` of the run's MLflow run (tracking.json), if it has one."""
    link = Link.load(run_dir)
    if link is None or link.run_id is None:
        return
    try:
        client(link.uri).log_artifacts(link.run_id, str(out), "model")
        print(f"rlexp: logged {out} to MLflow run {link.run_id} as artifact 'model'")
    except Exception as exc:  # the files are written; MLflow is a copy
        print(f"rlexp: warning: could not log {out} to MLflow run {link.run_id} "
              f"({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''})",
              file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(prog="python -m rlexp.export", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("run", help="run dir, checkpoint dir (<run>/checkpoints/<step>) or "
                                    "MLflow run id")
    parser.add_argument("--out", type=Path, default=None,
                        help="output dir (default: <run dir>/export)")
    parser.add_argument("--tracking-uri", default=None,
                        help="MLflow store to look a run id up in (default: as rlexp runs)")
    parser.add_argument("--adapters-only", action="store_true",
                        help="a LoRA run (model.lora): write the adapters alone (PEFT layout)")
    args = parser.parse_args(argv)
    try:
        out = export_run(args.run, args.out, args.tracking_uri, args.adapters_only)
    except UserError as exc:
        fail(str(exc))
    print(f"rlexp: exported {out}")


if __name__ == "__main__":
    main(sys.argv[1:])

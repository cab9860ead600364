"""LoRA (model.lora): low-rank adapters on the policy's projections through qwix, as Tunix does.

`apply` calls qwix as tunix/cli/utils/model.py `apply_lora_to_model` (0.1.7): qwix clones the
module graph (base arrays shared) and adds `(x @ A) @ B * alpha / rank` to each matched
projection, A and B as `nnx.LoRAParam`s `<weight>_lora_a` / `_lora_b`. Tunix optimizes and syncs
the adapters only (tunix/sft/peft_trainer.py, rl/rl_cluster.py); the base module is the reference
(no second copy, as tunix/cli/grpo_main.py). Pure NumPy here; jax, flax, qwix imported lazily."""

from __future__ import annotations

import itertools
import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from rlexp.base.errors import UserError
from rlexp.base.files import replace
from rlexp.config.schema import LoraConfig, ModelConfig
from rlexp.engine.weights import params
from rlexp.families.family import DECODER_PROJECTIONS, GEMMA_PROJECTIONS
from rlexp.planning.memory import adapted_projections

# Every projection name some family lets LoRA adapt (rlexp.families: `lora_projections`).
PROJECTIONS = tuple(dict.fromkeys(DECODER_PROJECTIONS + GEMMA_PROJECTIONS))

A_SUFFIX, B_SUFFIX = "_lora_a", "_lora_b"
# PEFT's adapter files (peft/utils/constants.py SAFETENSORS_WEIGHTS_NAME, CONFIG_NAME).
PEFT_WEIGHTS, PEFT_CONFIG = "adapter_model.safetensors", "adapter_config.json"


def apply(m: ModelConfig, base: Any, mesh: Any, seed: int) -> tuple[Any, Any]:
    """(base, policy): `base` placed on the trainer `mesh`, and the policy with model.lora's
    adapters on it, sharing its arrays. Placed first: RLCluster reshards (copies) every model
    that is not on its role's mesh, which would split the shared backbone into two copies."""
    import qwix
    from flax import nnx
    from tunix.rl import reshard

    lora = m.lora
    base = reshard.reshard_model_to_mesh(base, mesh)
    provider = qwix.LoraProvider(module_path=lora.targets, rank=lora.rank, alpha=lora.alpha)
    model = qwix.apply_lora_to_model(base, provider, rngs=nnx.Rngs(seed),
                                     **base.get_model_input())
    flat = params(model)
    names = adapter_names(flat)
    bad = f"model.lora.targets={lora.targets!r} is invalid for model.family={m.family}"
    outside = [k for k in names if _projection(k) is None]
    if not names or outside:
        raise UserError(f"{bad}: it adapts {outside[0].rsplit('/', 1)[0] if outside else 'nothing'}"
                        f"; the projections are layers/<i>/{{{','.join(adapted_projections(m))}}}")
    # what the plan counted is what qwix adapted, and every delta maps onto its weight
    missing = set(adapted_projections(m)) - {_projection(k)[1] for k in names}
    if missing:
        raise UserError(f"{bad}: this model has no {', '.join(sorted(missing))}")
    for key in (k for k in names if k.endswith(A_SUFFIX)):
        w = key[: -len(A_SUFFIX)]
        try:
            layout(flat[key].shape[:-1], flat[w + B_SUFFIX].shape[1:], flat[w].shape)
        except ValueError as exc:
            raise UserError(f"{bad}: {exc}") from None
    return base, model


class BaseLink:
    """After every update, point the policy's frozen weights back at the base's own arrays: the
    train step returns every weight as a new buffer, the frozen base included (Tunix 0.1.7, flax
    0.12), so the policy would hold a second base; re-pointing shares one base again."""

    def __init__(self, policy: Any, base: Any):
        from flax import nnx

        self.policy = policy
        self.state = nnx.state(base, nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam)))

    def __call__(self) -> None:
        from flax import nnx

        nnx.update(self.policy, self.state)


def counts(model: Any) -> dict[str, int]:
    """params/total (base + adapters) and params/trainable (what the optimizer updates)."""
    sizes = {k: int(np.prod(v.shape)) for k, v in params(model).items()}
    adapters = sum(sizes[k] for k in adapter_names(sizes))
    total = sum(sizes.values())
    return {"params/total": total, "params/trainable": adapters or total}


def adapter_names(flat: dict[str, Any]) -> list[str]:
    return [k for k in flat if k.endswith(A_SUFFIX) or k.endswith(B_SUFFIX)]


def has_adapters(flat: dict[str, Any]) -> bool:
    return any(k.endswith(A_SUFFIX) for k in flat)


def layout(a_dims: tuple[int, ...], b_dims: tuple[int, ...],
           shape: tuple[int, ...]) -> tuple[int, ...]:
    """The axes of (A's dims, B's dims) in the order of a weight of `shape`, for transpose. qwix
    (providers/lora.py `_parse_einsum_str_for_lora`) gives A the weight's contracting dims and B
    the others, in the weight's order: llama3/qwen3 list contracting dims first (identity); Gemma's
    q_einsum [heads, embed, hd] and kv_einsum interleave them. The one interleaving whose sizes
    match, else ValueError (two would be ambiguous)."""
    n, k = len(shape), len(a_dims)
    if tuple(shape) == tuple(a_dims) + tuple(b_dims):
        return tuple(range(n))
    found = []
    for pos in itertools.combinations(range(n), k):
        rest = [i for i in range(n) if i not in pos]
        if [shape[i] for i in pos] == list(a_dims) and [shape[i] for i in rest] == list(b_dims):
            # for each weight axis, its place among A's dims then B's: the inverse permutation
            found.append(tuple(np.argsort(list(pos) + rest).tolist()))
    if len(found) != 1:
        raise ValueError(f"adapters {tuple(a_dims)} x {tuple(b_dims)} map onto a weight "
                         f"{tuple(shape)} in {len(found)} ways")
    return found[0]


def delta(a: np.ndarray, b: np.ndarray, alpha: float, rank: int,
          shape: tuple[int, ...] | None = None) -> np.ndarray:
    """One adapter's update (A @ B) * alpha / rank in a `shape` weight's layout (default A, B)."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    d = np.tensordot(a64, b64, axes=([-1], [0])) * (alpha / rank)
    return d if shape is None else d.transpose(layout(a.shape[:-1], b.shape[1:], shape))


def merge(flat: dict[str, Any], alpha: float, rank: int) -> dict[str, np.ndarray]:
    """The plain weights of a LoRA policy: every base weight plus its adapters' delta (in the
    base weight's dtype), adapters dropped. Names use any separator ("/" or ".")."""
    out = {k: np.asarray(v) for k, v in flat.items() if not k.endswith((A_SUFFIX, B_SUFFIX))}
    for key in (k for k in flat if k.endswith(A_SUFFIX)):
        base = key[: -len(A_SUFFIX)]
        w = out[base]
        d = delta(flat[key], flat[base + B_SUFFIX], alpha, rank, w.shape)
        out[base] = (w.astype(np.float64) + d).astype(w.dtype)
    return out


def _projection(name: str) -> tuple[int, str] | None:
    """'layers/3/attn/q_proj/w_lora_a' (any separator) -> (3, 'attn/q_proj'), else None."""
    parts = re.split(r"[/.]", name)
    if len(parts) == 5 and parts[0] == "layers" and parts[1].isdigit() \
            and f"{parts[2]}/{parts[3]}" in PROJECTIONS:
        return int(parts[1]), f"{parts[2]}/{parts[3]}"
    return None


def to_peft(flat: dict[str, Any]) -> dict[str, np.ndarray]:
    """qwix adapters -> PEFT's names and layout (peft/tuners/lora/layer.py: lora_A.weight
    [rank, in], lora_B.weight [out, rank], delta = B @ A * lora_alpha / r, on HF's [out, in]
    weight). qwix's A flattens to [in, rank] and B to [rank, out] (see `delta`)."""
    out: dict[str, np.ndarray] = {}
    for key in (k for k in flat if k.endswith(A_SUFFIX)):
        where = _projection(key)
        if where is None:
            raise ValueError(f"no Hugging Face module for adapter {key}")
        layer, projection = where
        if projection not in DECODER_PROJECTIONS:  # Gemma's fused einsums: no 1:1 PEFT module
            raise ValueError(f"{projection} has no single Hugging Face module")
        block, proj = projection.split("/")
        a = np.asarray(flat[key])
        b = np.asarray(flat[key[: -len(A_SUFFIX)] + B_SUFFIX])
        rank = a.shape[-1]
        name = (f"base_model.model.model.layers.{layer}."
                f"{'self_attn' if block == 'attn' else 'mlp'}.{proj}")
        out[f"{name}.lora_A.weight"] = np.ascontiguousarray(a.reshape(-1, rank).T)
        out[f"{name}.lora_B.weight"] = np.ascontiguousarray(b.reshape(rank, -1).T)
    return out


def peft_config(lora: LoraConfig, base_model: str | None, adapted: list[str]) -> dict[str, Any]:
    """adapter_config.json as PEFT writes it for a LoraConfig (the fields PEFT requires)."""
    modules = sorted({p.split("/")[1] for p in adapted if p in DECODER_PROJECTIONS})
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": lora.rank,
            "lora_alpha": lora.alpha, "target_modules": modules, "lora_dropout": 0.0,
            "bias": "none", "fan_in_fan_out": False, "use_rslora": False,
            "base_model_name_or_path": base_model, "inference_mode": True}


def write_adapters(out: Path, flat: dict[str, Any], m: ModelConfig) -> Path:
    """The adapters alone as a PEFT dir `out` (atomic); the base: model.path or start weights."""
    from safetensors.numpy import save_file

    try:
        weights = to_peft(flat)
    except ValueError as exc:
        raise UserError(f"model.lora.adapters_only: model.family={m.family}: {exc} (PEFT's "
                        f"layout); export the merged model instead") from None
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(weights, str(tmp / PEFT_WEIGHTS), metadata={"format": "pt"})
    config = peft_config(m.lora, m.path, adapted_projections(m))
    (tmp / PEFT_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    if out.exists():
        shutil.rmtree(out)
    replace(tmp, out)
    return out

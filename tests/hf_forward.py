"""Logits of an exported model through `transformers` + torch (float32, CPU).

torch is not a dependency of rlexp: `scripts/setup --test` installs it, with its CUDA wheels,
into a directory of its own (RLEXP_TORCH_SITE, default /opt/rlexp-torch) that this module
appends to sys.path in a child process. The child keeps torch out of the test process, where
`transformers` has already decided, at its first import, that torch is absent.

    python tests/hf_forward.py EXPORT_DIR OUT.npy 1,40,41,17   # what hf_logits() runs
    python tests/hf_forward.py --build SEED TOKENS DIR...      # hf_build(): random models
    python tests/hf_forward.py --logits TOKENS DIR...          # hf_logits_many()
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

TORCH_SITE = Path(os.environ.get("RLEXP_TORCH_SITE", "/opt/rlexp-torch"))


def torch_available() -> bool:
    return (TORCH_SITE / "torch" / "__init__.py").is_file()


def require_torch() -> None:
    """Fail under CI=true (setup must have installed it), skip elsewhere."""
    from conftest import require  # here, not at the top: the child process runs without pytest

    require(torch_available(), f"torch is not installed in {TORCH_SITE}",
            "bash scripts/setup --test")


def _child_env() -> dict[str, str]:
    """This environment for the transformers child, copied safely from other threads' unsets
    (rlexp imported here, not at the top: this file also runs as the torch-side script)."""
    from rlexp.base.runtime import environment

    return {**environment(), "TRANSFORMERS_VERBOSITY": "error"}


def hf_logits(export_dir: Path, tokens: np.ndarray) -> np.ndarray:
    """[T, V] float32 logits of AutoModelForCausalLM.from_pretrained(export_dir) for one row."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "logits.npy"
        proc = subprocess.run(
            [sys.executable, __file__, str(export_dir), str(out),
             ",".join(str(int(t)) for t in tokens)],
            capture_output=True, text=True, timeout=300,
            env=_child_env())
        if proc.returncode != 0:
            raise AssertionError(f"transformers forward failed:\n{proc.stderr[-3000:]}")
        return np.load(out)


def hf_build(dirs: list[Path], tokens: np.ndarray, seed: int = 0) -> dict[str, dict]:
    """For each dir holding a config.json: a random `transformers` model of that config (every
    parameter drawn anew, norms around their identity), saved there as safetensors, and its
    [T, V] float32 logits for `tokens` saved as <dir>/hf_logits.npy. Returns {dir: {"params":
    parameter count (a tied embedding once)}}. One child process for all dirs."""
    import json

    proc = subprocess.run(
        [sys.executable, __file__, "--build", str(seed), ",".join(str(int(t)) for t in tokens),
         *map(str, dirs)],
        capture_output=True, text=True, timeout=600,
        env=_child_env())
    if proc.returncode != 0:
        raise AssertionError(f"transformers build failed:\n{proc.stderr[-3000:]}")
    return {str(d): json.loads((Path(d) / "hf_built.json").read_text()) for d in dirs}


def hf_logits_many(dirs: list[Path], tokens: np.ndarray) -> list[np.ndarray]:
    """hf_logits of several model dirs in one child process."""
    proc = subprocess.run(
        [sys.executable, __file__, "--logits", ",".join(str(int(t)) for t in tokens),
         *map(str, dirs)],
        capture_output=True, text=True, timeout=600,
        env=_child_env())
    if proc.returncode != 0:
        raise AssertionError(f"transformers forward failed:\n{proc.stderr[-3000:]}")
    return [np.load(Path(d) / "hf_logits.npy") for d in dirs]


def _forward(model, tokens: str) -> np.ndarray:
    import torch

    ids = torch.tensor([[int(t) for t in tokens.split(",")]])
    with torch.no_grad():
        return model(input_ids=ids).logits[0].numpy().astype(np.float32)


def _build(seed: str, tokens: str, *dirs: str) -> None:
    import json

    sys.path.append(str(TORCH_SITE))
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    for d in dirs:
        torch.manual_seed(int(seed))
        config = AutoConfig.from_pretrained(d)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32,
                                                 attn_implementation="eager")
        gemma = config.model_type.startswith("gemma")  # norms scale by (1 + w)
        with torch.no_grad():
            for name, p in model.named_parameters():
                noise = torch.randn(p.shape) * (0.3 if "norm" in name else 0.2)
                p.copy_(noise + (1.0 if "norm" in name and not gemma else 0.0))
        model.eval()
        model.save_pretrained(d, safe_serialization=True)
        np.save(Path(d) / "hf_logits.npy", _forward(model, tokens))
        count = sum(p.numel() for p in model.parameters())  # shared tensors once
        (Path(d) / "hf_built.json").write_text(json.dumps({"params": int(count)}))


def _logits(tokens: str, *dirs: str) -> None:
    sys.path.append(str(TORCH_SITE))
    import torch
    from transformers import AutoModelForCausalLM

    for d in dirs:
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                     attn_implementation="eager")
        model.eval()
        np.save(Path(d) / "hf_logits.npy", _forward(model, tokens))


def _main(export_dir: str, out: str, tokens: str) -> None:
    sys.path.append(str(TORCH_SITE))  # appended: the test environment's own packages win
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(export_dir, dtype=torch.float32)
    model.eval()
    ids = torch.tensor([[int(t) for t in tokens.split(",")]])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
    np.save(out, logits.numpy().astype(np.float32))


if __name__ == "__main__":
    if sys.argv[1] == "--build":
        _build(*sys.argv[2:])
    elif sys.argv[1] == "--logits":
        _logits(*sys.argv[2:])
    else:
        _main(*sys.argv[1:])

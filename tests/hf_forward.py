"""Logits of an exported model through `transformers` + torch (float32, CPU).

torch is not a dependency of rlexp: `scripts/setup --test` installs it, with its CUDA wheels,
into a directory of its own (RLEXP_TORCH_SITE, default /opt/rlexp-torch) that this module
appends to sys.path in a child process. The child keeps torch out of the test process, where
`transformers` has already decided, at its first import, that torch is absent.

    python tests/hf_forward.py EXPORT_DIR OUT.npy 1,40,41,17   # what hf_logits() runs
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


def hf_logits(export_dir: Path, tokens: np.ndarray) -> np.ndarray:
    """[T, V] float32 logits of AutoModelForCausalLM.from_pretrained(export_dir) for one row."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "logits.npy"
        proc = subprocess.run(
            [sys.executable, __file__, str(export_dir), str(out),
             ",".join(str(int(t)) for t in tokens)],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
        if proc.returncode != 0:
            raise AssertionError(f"transformers forward failed:\n{proc.stderr[-3000:]}")
        return np.load(out)


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
    _main(*sys.argv[1:])

"""Model families: one module per architecture (llama3, qwen2, qwen3, gemma2, gemma3, cohere),
each defining `FAMILY = ModelFamily(...)` (family), found by `families()` and `get()`. Nothing
outside them branches on a family's name, so adding an architecture is one file. Layer: beside
algo; imports rlexp.base only (no JAX, no Tunix)."""

from rlexp.families.family import ModelFamily, families, get

__all__ = ["ModelFamily", "families", "get"]

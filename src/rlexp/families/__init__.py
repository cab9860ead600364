"""Model families: one module per architecture, each defining `FAMILY = ModelFamily(...)`
(module family, which also finds them: `families()`, `get()`): llama3, qwen3, qwen2 (Qwen2.5),
gemma3, gemma2, cohere (Aya Expanse, Command R: rlexp's own model in rlexp.engine.cohere, as
Tunix has none). Nothing outside them branches on a family's name, so adding an architecture
is one file (tests/test_families.py checks both).

Layer: families, beside algo. May import rlexp.base only: no JAX, no Tunix (rlexp.engine
resolves the Tunix names a family gives), no config (a model section is read duck-typed).
"""

from rlexp.families.family import ModelFamily, families, get

__all__ = ["ModelFamily", "families", "get"]

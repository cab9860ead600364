"""Model families: one module per architecture, each defining `FAMILY = ModelFamily(...)`.

`family` defines `ModelFamily` (Tunix's model code by name, the Hugging Face config.json and
weight-name mappings both ways, the memory formula's inputs, the numerics patches it needs)
and finds the families by name (`families()`, `get()`); the config validator lists them as
model.family's choices. One module per family: llama3, qwen3, qwen2 (Qwen2.5), gemma3, gemma2,
cohere (Aya Expanse, Command R: rlexp's own model in rlexp.engine.cohere, as Tunix has none).
Nothing outside these modules branches on a family's name, so adding an architecture is one
file (tests/test_families.py checks both).

Layer: families, beside algo. May import rlexp.base only: no JAX, no Tunix (rlexp.engine
resolves the Tunix names a family gives), no config (a model section is read duck-typed).
"""

from rlexp.families.family import ModelFamily, families, get

__all__ = ["ModelFamily", "families", "get"]

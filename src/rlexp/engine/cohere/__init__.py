"""Cohere (Command R, Aya Expanse) in Flax NNX, shaped as a Tunix model package (`model`,
`params`) so rlexp.families.cohere names it like Tunix's own; Tunix 0.1.7 has none. Unlike Llama
(transformers' models/cohere/modeling_cohere.py): one mean-centred LayerNorm per layer feeding
attention and MLP in parallel; RoPE rotating adjacent pairs; optional per-head q/k LayerNorms;
logits times logit_scale; tied embeddings."""

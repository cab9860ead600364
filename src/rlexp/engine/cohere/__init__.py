"""Cohere (Command R, Aya Expanse: config.json model_type `cohere`) in Flax NNX, shaped as a
Tunix model package so rlexp.families.cohere can name it like Tunix's own: `model` (ModelConfig,
RematConfig, DecoderLayer, the `Cohere` class with Tunix's call and KV-cache interface) and
`params` (create_model_from_safe_tensors through Tunix's safetensors loader). Tunix 0.1.7 has
no Cohere model (tunix/models: gemma, gemma3, gemma4, llama3, qwen2, qwen3).

What sets it apart from Llama (transformers' models/cohere/modeling_cohere.py): one LayerNorm
per layer feeding attention and MLP in parallel (x + attn(n(x)) + mlp(n(x))); LayerNorm without
bias, mean-centred (not RMSNorm); RoPE rotating adjacent pairs (repeat_interleave, not halves);
optional per-head q/k LayerNorms (use_qk_norm); logits multiplied by logit_scale; tied
embeddings.
"""

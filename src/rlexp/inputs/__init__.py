"""Inputs layer: where a model's files come from and how they are read.

model_files (a model dir: config.json, weights, tokenizer), sources (hub ids, gs:// buckets,
local dirs), storage (run outputs on a bucket), tokenizer (the tiny model's character
tokenizer), smollm2 (the packaged SmolLM2 GGUF, converted once).
May import: rlexp.config, rlexp.algo, rlexp.families, rlexp.base.
"""

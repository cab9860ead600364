"""Inputs layer: where a model's files come from (local, hub, bucket, the packaged SmolLM2),
how they are read, and run outputs on a bucket. May import: rlexp.config, rlexp.algo,
rlexp.families, rlexp.base."""

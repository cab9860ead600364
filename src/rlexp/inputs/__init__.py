"""Inputs layer: where a model's files come from (sources: local, hub, bucket; smollm2: the
packaged SmolLM2), how they are read (model_files, tokenizer), and run outputs on a bucket
(storage). May import: rlexp.config, rlexp.algo, rlexp.families, rlexp.base."""

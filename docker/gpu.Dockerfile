# The image a GPU job runs (multi-node SLURM with containers, GKE GPU node pools): rlexp at the
# commit it is built from, its pinned dependencies and JAX's CUDA 12 wheels (which bring their
# own CUDA libraries: the host needs only the NVIDIA driver and container toolkit).
# Build from the checkout's root (README.md, "Launchers"):
#   docker build -f docker/gpu.Dockerfile --build-arg RLEXP_COMMIT=$(git rev-parse HEAD) \
#     -t REGISTRY/rlexp-gpu:$(git rev-parse --short HEAD) .
# rollout=vllm: --build-arg VLLM=0.31.0, rlexp[vllm]'s pin (vLLM pins its own torch and CUDA;
# 0.32.0's tree wants safetensors >= 0.8, which Tunix 0.1.7 refuses).
FROM python:3.11-slim

ARG RLEXP_COMMIT=unknown
ARG VLLM=
LABEL org.opencontainers.image.revision=$RLEXP_COMMIT

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 \
    RLEXP_COMMIT=$RLEXP_COMMIT
WORKDIR /opt/rlexp

COPY requirements.lock ./
RUN pip install -r requirements.lock

COPY . .
RUN pip install --no-deps . \
    && pip install "jax[cuda12]==0.10.2" "gcsfs>=2024.2" \
    && if [ -n "$VLLM" ]; then pip install "vllm==$VLLM" "transformers==5.12.1" \
         "google-tunix==0.1.7" "jax==0.10.2"; fi \
    && python -c "import rlexp.planning.hardware, jax; print('rlexp', jax.__version__)"

WORKDIR /work
ENTRYPOINT []
CMD ["python", "-m", "rlexp", "--help"]

# Recall: CPU image. One uvicorn worker per container (each worker would hold its own model copy
# and its own batch queue, defeating shared batching); scale with compose replicas instead.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    RECALL_HOST=0.0.0.0 \
    RECALL_PORT=8000 \
    RECALL_DATA_DIR=/data \
    RECALL_DEVICE=cpu \
    NUMBA_CACHE_DIR=/tmp/numba-cache

# ffmpeg: PyAV fallback decoding (M4A, WebM, video sound tracks); libsndfile1: soundfile;
# espeak-ng: speech synthesis used by the audio tools.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ffmpeg libsndfile1 espeak-ng \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app

# Every version comes from requirements.lock, the versions `make test` and CI install
# (scripts/lock.sh refreshes it). torch first, from the CPU index, at the lock's torch==2.13.0:
# left to the resolver, torch pulls multi-GB CUDA wheels. --no-deps: that index carries only
# some versions of torch's own dependencies; the next layer installs them from PyPI at the
# lock's versions.
COPY requirements.lock ./
RUN pip install --no-deps -c requirements.lock torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

# Dependencies in their own layer, keyed on pyproject.toml and the lock only, so editing code
# does not reinstall them. The list comes straight from pyproject (tomllib is in 3.11's stdlib;
# the image needs neither the test nor the cluster extra); the lock pins each version, torch's
# dependencies included, and the torch pin is already satisfied by the CPU wheel above.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install -c requirements.lock -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# The application itself; --no-deps because the layer above installed them.
COPY README.md ./
COPY app ./app
COPY recall ./recall
COPY docker ./docker
RUN pip install --no-deps . \
    && rm -rf build ./*.egg-info \
    && chmod 0755 docker/entrypoint.sh docker/healthcheck.py

# Non-root user; it owns only the data directory, the code stays root-owned and read-only.
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/recall recall \
    && mkdir -p /data \
    && chown recall:recall /data
USER recall
VOLUME ["/data"]

EXPOSE 8000

# Readiness, not liveness: the container is healthy once encoders and indices are loaded
# (/readyz answers 503 until then). slim has no curl, hence a Python probe.
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "/app/docker/healthcheck.py"]

# The entrypoint checks /data, then execs `recall serve` (one uvicorn worker) so signals reach it.
ENTRYPOINT ["/app/docker/entrypoint.sh"]
CMD ["recall", "serve"]

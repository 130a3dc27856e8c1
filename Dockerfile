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
    NUMBA_CACHE_DIR=/tmp/numba-cache \
    MPLCONFIGDIR=/home/recall/.cache/matplotlib

# ffmpeg: PyAV fallback decoding (M4A, WebM, video sound tracks); libsndfile1: soundfile;
# espeak-ng: speech synthesis used by the audio tools.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ffmpeg libsndfile1 espeak-ng \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app

# Every package comes from requirements.lock, the versions `make test` and CI install, each with the
# sha256 of its file (scripts/lock.sh refreshes it), and every install is hash-checked
# (--require-hashes: pip refuses a file whose hash is not the lock's). pip itself first: the image's
# pip 24 reads no hashes from a constraints file, the lock's pip does; setuptools with it, the build
# backend for the project below (built without build isolation, so from this hashed copy).
COPY requirements.lock ./
RUN grep -E '^(pip|setuptools)==' requirements.lock >/tmp/bootstrap.txt \
    && pip install --require-hashes --no-deps -r /tmp/bootstrap.txt \
    && rm /tmp/bootstrap.txt

# torch next, from the CPU index, at the lock's torch==2.13.0, whose hash is the CPU wheel's: left to
# the resolver, torch pulls multi-GB CUDA wheels. --no-deps: that index carries only some versions of
# torch's own dependencies; the next layer installs them from PyPI at the lock's versions.
RUN pip install --require-hashes --no-deps -c requirements.lock torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

# Dependencies in their own layer, keyed on pyproject.toml and the lock only, so editing code
# does not reinstall them. The list comes straight from pyproject (tomllib is in 3.11's stdlib;
# the image needs neither the test nor the cluster extra); the lock pins each version and hash,
# torch's dependencies included (a package the lock lacks stops the build), and the torch pin is
# already satisfied by the CPU wheel above. `pip check`: every requirement met.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install --require-hashes -c requirements.lock -r /tmp/requirements.txt \
    && pip check \
    && rm /tmp/requirements.txt

# The application itself; --no-deps because the layer above installed them, and no build
# isolation (which would fetch an unhashed setuptools): the lock's setuptools builds it.
COPY README.md ./
COPY app ./app
COPY recall ./recall
COPY docker ./docker
RUN pip install --no-deps --no-build-isolation . \
    && pip check \
    && rm -rf build ./*.egg-info \
    && chmod 0755 docker/entrypoint.sh docker/healthcheck.py

# Non-root user; it owns only the data directory and its cache folder, the code stays root-owned and
# read-only. The image runs with a read-only root filesystem (docker-compose.yml: read_only, with
# tmpfs on /tmp and ~/.cache; `docker run --read-only --tmpfs /tmp --tmpfs /home/recall/.cache`):
# everything it writes goes to /data (the volume), ~/.cache (Hugging Face, ~/.cache/recall, matplotlib
# through MPLCONFIGDIR) or /tmp (uploads being received, NUMBA_CACHE_DIR).
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/recall recall \
    && mkdir -p /data /home/recall/.cache \
    && chown recall:recall /data /home/recall/.cache
USER 10001:10001
VOLUME ["/data"]

EXPOSE 8000

# Readiness, not liveness: the container is healthy once encoders and indices are loaded
# (/readyz answers 503 until then). slim has no curl, hence a Python probe.
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "/app/docker/healthcheck.py"]

# The entrypoint checks /data, then execs `recall serve` (one uvicorn worker) so signals reach it.
ENTRYPOINT ["/app/docker/entrypoint.sh"]
CMD ["recall", "serve"]

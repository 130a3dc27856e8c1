# The cluster image: the service image plus the cluster extra (psycopg 3, Ray), for the compose
# "cluster" profile. API replicas, the Ray head and the Ray workers all run it, so the driver and
# the workers have the same Python, Ray and application code (Ray requires it).
FROM recall:latest
USER root
# hash-checked like the service image: every package and file from requirements.lock (its cluster extra)
RUN pip install --no-cache-dir --require-hashes -c /app/requirements.lock 'psycopg[binary]>=3.2' 'ray>=2.40' \
    && pip check \
    && chmod 0755 /app/docker/ray-node-serve.sh
USER 10001:10001

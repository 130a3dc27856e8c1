# The cluster image: the service image plus the cluster extra (psycopg 3, Ray), for the compose
# "cluster" profile. API replicas, the Ray head and the Ray workers all run it, so the driver and
# the workers have the same Python, Ray and application code (Ray requires it).
FROM recall:latest
USER root
RUN pip install --no-cache-dir -c /app/requirements.lock 'psycopg[binary]>=3.2' 'ray>=2.40' \
    || pip install --no-cache-dir 'psycopg[binary]>=3.2' 'ray>=2.40' \
    && chmod 0755 /app/docker/ray-node-serve.sh
USER recall

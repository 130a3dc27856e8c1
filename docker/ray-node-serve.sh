#!/bin/sh
# An API replica in cluster mode (compose profile "cluster", Kubernetes Deployment).
# `recall serve` is a Ray driver, and a Ray driver runs on a Ray node: join the head as a node that
# offers no CPUs or GPUs (no index shard or embedding worker is placed on it), then serve.
# With token authentication on, `ray start` reads the token from RAY_AUTH_MODE=token and
# RAY_AUTH_TOKEN_PATH, and `recall serve` from RECALL_CLUSTER__RAY_AUTH_TOKEN_FILE (README,
# "Joining a Ray head"). The head may still be starting: try for about a minute.
set -eu
: "${RECALL_RAY_ADDRESS:?set RECALL_RAY_ADDRESS to the Ray head (host:port)}"
tries=0
# RECALL_CLUSTER__NODE_IP, when set, is this node's address for Ray and for `recall serve` alike
until ray start --address="$RECALL_RAY_ADDRESS" --num-cpus=0 --num-gpus=0 --disable-usage-stats \
        ${RECALL_CLUSTER__NODE_IP:+"--node-ip-address=$RECALL_CLUSTER__NODE_IP"}; do
    tries=$((tries + 1))
    if [ "$tries" -ge 30 ]; then
        echo "recall: could not join the Ray head at $RECALL_RAY_ADDRESS (RECALL_RAY_ADDRESS) as a node" >&2
        exit 1
    fi
    sleep 2
done
exec /app/docker/entrypoint.sh recall serve "$@"

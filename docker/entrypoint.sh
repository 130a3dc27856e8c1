#!/bin/sh
# Container entrypoint.
#   (no arguments) or flags only  ->  recall serve [flags]
#   a recall subcommand            ->  recall SUBCOMMAND ...   (e.g. `ingest /in --collection c`)
#   anything else                  ->  run it as given         (e.g. `recall ingest ...`, `sh`)
# Every path ends in exec, so the server (not this shell) is PID 1 and receives SIGTERM.
set -eu

check_data_dir() {
    data_dir="${RECALL_DATA_DIR:-/data}"
    if ! mkdir -p "$data_dir" 2>/dev/null; then
        echo "recall: cannot create the data directory '$data_dir' (RECALL_DATA_DIR)." >&2
        echo "recall: mount a volume there (docker run -v recall-data:$data_dir ...) or set RECALL_DATA_DIR to a writable path." >&2
        exit 1
    fi
    probe="$data_dir/.recall-write-test.$$"
    if ! (: >"$probe") 2>/dev/null; then
        echo "recall: the data directory '$data_dir' is not writable by uid $(id -u)." >&2
        echo "recall: use a named volume, or chown the mounted host directory to $(id -u):$(id -g)." >&2
        exit 1
    fi
    rm -f "$probe"
}

if [ "$#" -eq 0 ]; then
    set -- recall serve
fi
case "$1" in
    -*) set -- recall serve "$@" ;;
    serve | ingest | search | train | eval) set -- recall "$@" ;;
esac

# Only the service and its tools need the data directory; a shell must still start when the
# volume is broken, since that is how one debugs it.
if [ "$1" = "recall" ]; then
    check_data_dir
fi
exec "$@"

"""Cluster administration: ``python -m app.cluster.admin status | reshard N``.

Shard actors are named by (catalog, collection, shard number, shard count) and build their
partition from PostgreSQL, so re-sharding moves no data by hand:

    RECALL_CATALOG_URL=... RECALL_RAY_ADDRESS=... python -m app.cluster.admin reshard 4

starts the 4 new shard actors of every collection, waits until each has built its partition
(searches keep using the old actors meanwhile), then ends every shard actor of another count
and deletes its snapshots.
Then set ``RECALL_INDEX_SHARDS=4`` on the API processes and restart them (a rolling restart is
fine: processes on the old count answer until they go). ``status`` lists the shard actors.
"""

from __future__ import annotations

import argparse
import json
import sys

from app.cluster.ray_connect import RayHeadUnavailable
from app.cluster.ray_runtime import NAMESPACE, ensure_ray
from app.cluster.remote_index import RemoteCollectionIndex, actor_name, catalog_prefix, retire_shards
from app.settings import Settings
from app.storage.protocol import open_catalog


def _shard_actors(catalog_url: str) -> list[str]:
    """This catalog's shard actors (other catalogs may share the Ray cluster)."""
    import ray

    prefix = catalog_prefix(catalog_url)
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if a.get("namespace") == NAMESPACE and a["name"].startswith(prefix))


def reshard(settings: Settings, count: int) -> dict[str, object]:
    import ray

    catalog = open_catalog(settings.catalog_url, settings.data_dir)
    wanted = set()
    target = settings.model_copy(update={"index_shards": count})
    for collection in catalog.list_collections():
        RemoteCollectionIndex.open(collection, target)  # builds (or finds) the new actors and waits for them
        wanted |= {actor_name(settings.catalog_url or "", collection, n, count) for n in range(count)}
    killed = []
    for name in _shard_actors(settings.catalog_url or ""):
        if name not in wanted:
            retire_shards([ray.get_actor(name, namespace=NAMESPACE)])  # its snapshots go with it
            killed.append(name)
    return {"shards": count, "actors": sorted(wanted), "killed": killed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.cluster.admin", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("status", help="list the shard actors on the Ray cluster")
    re = sub.add_parser("reshard", help="build N shards per collection, then retire the others")
    re.add_argument("shards", type=int)
    args = parser.parse_args(argv)
    settings = Settings()
    if not settings.catalog_url or not settings.ray_address:
        parser.error("set RECALL_CATALOG_URL and RECALL_RAY_ADDRESS")
    try:
        ensure_ray(settings.ray_address, settings.cluster)
    except RayHeadUnavailable as exc:
        parser.exit(2, f"{parser.prog}: {exc}\n")
    if args.command == "status":
        print(json.dumps({"actors": _shard_actors(settings.catalog_url)}, indent=2))
    else:
        if not 1 <= args.shards <= 256:
            parser.error("shards must be between 1 and 256")
        print(json.dumps(reshard(settings, args.shards), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Joining a Ray cluster: the token, the node address, and one clear message when it cannot be done.

A Ray head started with ``ray start --head`` turns token authentication on when it finds a
token (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``, or ``~/.ray/auth_token``, which any earlier
local ``ray.init()`` writes), while ``ray.init(address=...)`` never turns it on by itself: a
process joining by address sends no token unless ``RAY_AUTH_MODE=token`` and a token are in its
environment. :func:`prepare_environment` puts them there from RECALL_CLUSTER__RAY_AUTH_TOKEN_FILE
(or ``__RAY_AUTH_TOKEN``), the way Ray documents, before Ray reads them.

A refused or unreachable head is found before ``ray.init`` (which would retry for 20 s and then
say only "Failed to connect to Ray cluster"): a TCP connection says whether anything listens,
a bare GCS client says within a second whether the token is accepted. Each failure raises
:class:`RayHeadUnavailable` with a message that names the setting to fix; ``recall serve``
prints it and exits instead of answering 500 to every request.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from typing import Any

from app.settings import ClusterSettings

PROBE_TIMEOUT_S = 5.0
# Task arguments up to this size travel inside the call to the actor instead of through this node's
# object store (Ray's default: 100 KiB). An object-store write goes through the local raylet, and
# where that is the head's (an API process on the head's machine) a write after the head died ends
# this process at once ("the local Raylet is dead"): ingest batches (~2 MB of audio) must not need
# it. Below Ray's 10 MiB limit on the arguments inlined into one call (task_rpc_inlined_bytes_limit).
INLINE_ARGS_VARIABLE = "RAY_max_direct_call_object_size"
INLINE_ARGS_BYTES = 8 * 1024 * 1024
TOKEN_SETTINGS = "RECALL_CLUSTER__RAY_AUTH_TOKEN_FILE (or RECALL_CLUSTER__RAY_AUTH_TOKEN)"


class RayHeadUnavailable(RuntimeError):
    """The Ray cluster at RECALL_RAY_ADDRESS cannot be joined; the message says which setting to fix."""


class NoLocalNode(RayHeadUnavailable):
    """The head answers, but this machine has no Ray node of its cluster (a driver must run on one)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def head_host_port(address: str) -> tuple[str, int] | None:
    """``host:port`` of a head named by address; None for 'auto', 'local' and ``ray://`` (Ray finds those)."""
    if address in ("auto", "local") or "://" in address or ":" not in address:
        return None
    host, _, port = address.rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise RayHeadUnavailable(f"RECALL_RAY_ADDRESS={address!r} is not host:port ('auto', 'local' or ray://... otherwise)") from None


def prepare_environment(cluster: ClusterSettings) -> None:
    """Hand the token, the node address and the inlined argument size to Ray through the variables it reads.

    Set before ``import ray`` where possible; when Ray is already imported, its cached config
    and token are refreshed the way Ray itself does when it enables token mode.
    """
    auth: dict[str, str] = {}
    if cluster.ray_auth_token is not None:
        auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": cluster.ray_auth_token.get_secret_value().strip()}
    elif cluster.ray_auth_token_file is not None:
        path = cluster.ray_auth_token_file.expanduser()
        try:
            empty = not path.read_text().strip()
        except OSError as exc:
            raise RayHeadUnavailable(f"RECALL_CLUSTER__RAY_AUTH_TOKEN_FILE={str(path)!r} cannot be read ({exc.strerror}); "
                                     "point it at the file holding the Ray head's token") from None
        if empty:
            raise RayHeadUnavailable(f"RECALL_CLUSTER__RAY_AUTH_TOKEN_FILE={str(path)!r} is empty; it must hold the Ray head's token")
        auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path.resolve())}
    os.environ.setdefault(INLINE_ARGS_VARIABLE, str(INLINE_ARGS_BYTES))  # read by Ray when it joins
    if auth:
        for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
            os.environ.pop(name, None)  # Ray prefers RAY_AUTH_TOKEN: a stale one would win over the file
        os.environ.update(auth)
    if cluster.node_ip is not None and is_loopback(cluster.node_ip):
        # On Linux Ray replaces a loopback node address (and a loopback head address) with the
        # machine's; its single-machine mode keeps loopback, as the head started in that mode does.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        constants = sys.modules.get("ray._private.ray_constants")
        if constants is not None:  # read at import: already imported, so set it where it was read
            constants.ENABLE_RAY_CLUSTER = False
    if auth and "ray._raylet" in sys.modules:
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()


def check_head(address: str, cluster: ClusterSettings) -> None:
    """Raise :class:`RayHeadUnavailable` unless the head at ``address`` listens and accepts this process's token."""
    target = head_host_port(address)
    if target is None:
        return
    host, port = target
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise RayHeadUnavailable(
            f"cannot reach the Ray head at {host}:{port} ({reason}): start it (`ray start --head --port={port}`) "
            f"or fix RECALL_RAY_ADDRESS={address!r}") from None
    _check_token(f"{host}:{port}", cluster)


def _check_token(gcs_address: str, cluster: ClusterSettings) -> None:
    try:
        from ray._raylet import InnerGcsClient
        from ray.exceptions import AuthenticationError, RpcError
    except ImportError:  # a Ray without this client: ray.init's own error will have to do
        return
    try:
        InnerGcsClient.standalone(gcs_address, None, int(PROBE_TIMEOUT_S * 1000))
    except AuthenticationError:
        raise RayHeadUnavailable(_token_refused(gcs_address, cluster)) from None
    except RpcError as exc:
        raise RayHeadUnavailable(
            f"something listens at {gcs_address} but it answers no Ray head requests ({exc}); "
            "fix RECALL_RAY_ADDRESS: the head's address is the --port of `ray start --head` (6379 by default)") from None


def _token_refused(gcs_address: str, cluster: ClusterSettings) -> str:
    if cluster.ray_auth_token_file is not None:
        given = f"refused the token in RECALL_CLUSTER__RAY_AUTH_TOKEN_FILE={str(cluster.ray_auth_token_file)!r}"
    elif cluster.ray_auth_token is not None:
        given = "refused the token in RECALL_CLUSTER__RAY_AUTH_TOKEN"
    elif os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
        given = "refused the token in this process's RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH / ~/.ray/auth_token"
    else:
        given = "requires token authentication and this process sent no token"
    return (f"the Ray head at {gcs_address} {given}: set {TOKEN_SETTINGS} to the head's token, the file "
            "`ray start --head` read (its RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token where it ran; "
            "`ray get-auth-token` there prints it)")


def init_ray(address: str, cluster: ClusterSettings, namespace: str) -> None:
    """``prepare_environment``, ``check_head``, then ``ray.init``; every failure as :class:`RayHeadUnavailable`."""
    prepare_environment(cluster)
    check_head(address, cluster)
    import ray

    options: dict[str, Any] = {"namespace": namespace, "log_to_driver": False}
    if cluster.node_ip is not None:
        options["_node_ip_address"] = cluster.node_ip
    try:
        if address == "local":
            ray.init(include_dashboard=False, **options)
        else:
            ray.init(address=address, **options)
    except Exception as exc:  # noqa: BLE001 - translated into the one message serve prints
        causes = _causes(exc)
        kind = NoLocalNode if _no_local_node(causes) else RayHeadUnavailable
        raise kind(_init_failed(address, cluster, causes)) from exc


def _causes(exc: BaseException | None) -> list[str]:
    causes: list[str] = []
    while exc is not None and len(causes) < 5:  # ray.init wraps the cause in "Failed to connect to Ray cluster"
        causes.append(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        exc = exc.__cause__ or exc.__context__
    return causes


def _no_local_node(causes: list[str]) -> bool:
    # none registered at this machine's address, or only one left from a cluster the head no longer is
    return any("No node info found" in text or "Failed to get node info for possible node ids" in text for text in causes)


def _init_failed(address: str, cluster: ClusterSettings, causes: list[str]) -> str:
    if _no_local_node(causes):
        # a driver attaches to a Ray node on its own machine; none has the address it looked for
        where = f"RECALL_CLUSTER__NODE_IP={cluster.node_ip!r}" if cluster.node_ip else "this machine's address"
        return (f"joined the Ray cluster at RECALL_RAY_ADDRESS={address!r} but found no Ray node of it on this "
                f"machine at {where}: an API process must run on a Ray node, so run `ray start --address=<head>` "
                "here first, or set RECALL_CLUSTER__NODE_IP to the --node-ip-address this machine's node was started with")
    target = head_host_port(address)
    hint = ""
    if target is not None and is_loopback(target[0]) and not (cluster.node_ip and is_loopback(cluster.node_ip)):
        hint = ("; Ray dials a 127.0.0.1 head at this machine's address: a head started with "
                "--node-ip-address=127.0.0.1 and RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 also needs RECALL_CLUSTER__NODE_IP=127.0.0.1")
    return (f"cannot join the Ray cluster at RECALL_RAY_ADDRESS={address!r}: {': '.join(causes)} "
            f"(check it, RECALL_CLUSTER__NODE_IP and {TOKEN_SETTINGS}){hint}")

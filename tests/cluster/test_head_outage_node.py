"""An API process whose Ray node did not survive its head: it waits for the head, then exits for its supervisor.

On its own Ray node (docker/ray-node-serve.sh) an API process cannot rejoin a restarted head: the node's
raylet ended with the head, and a Ray driver must run on a node of the cluster it joins. Ray's own
limit used to end such a process 60 s into any outage; now it stays up through the outage
(app/cluster/head_watch.py) and, once the head answers but joining keeps finding no node here for
NO_NODE_GRACE_S, exits with code 3 so its supervisor starts node and process again. A second Ray
node cannot be started on this machine's loopback (Ray's single-machine mode refuses multi-node
clusters), so the watch loop runs here with the join answering as Ray answers in that case.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from app.cluster import head_watch, ray_runtime
from app.cluster.ray_connect import NoLocalNode, RayHeadUnavailable, _causes, _no_local_node
from app.settings import ClusterSettings
from app.usecases.open_gate import OpenGate

ADDRESS = "127.0.0.1:6399"


class Exited(Exception):
    pass


def _services() -> SimpleNamespace:
    return SimpleNamespace(not_ready=[], collections={}, retired=[], open_gate=OpenGate(), encoders=None,
                           settings=SimpleNamespace(ray_address=ADDRESS, cluster=ClusterSettings()))


@pytest.fixture
def watched(monkeypatch):
    """The head lost for two probes, then answering; each join ends as the next of ``outcomes`` (the last
    repeats: an exception to raise, or None for joined); exits recorded."""
    probes = iter([False, False])
    monkeypatch.setattr(head_watch, "reachable", lambda address, timeout: next(probes, True))
    monkeypatch.setattr(ray_runtime, "connected", lambda: False)  # nothing to leave: the join is what is tested
    monkeypatch.setattr(head_watch, "NO_NODE_GRACE_S", 0.5)
    state = SimpleNamespace(exits=[], joins=[], outcomes=[None])

    def reconnect(address, cluster, wait_s=30.0):
        state.joins.append(address)
        outcome = state.outcomes.pop(0) if len(state.outcomes) > 1 else state.outcomes[0]
        if outcome is not None:
            raise outcome

    def exit_process(code):
        state.exits.append(code)
        raise Exited

    monkeypatch.setattr(ray_runtime, "reconnect", reconnect)
    monkeypatch.setattr(head_watch, "exit_process", exit_process)
    yield state
    ray_runtime.mark_head_lost(False)


def test_no_node_here_after_the_head_is_back_exits_with_code_3(watched):
    services = _services()
    watched.outcomes = [NoLocalNode("no Ray node of it on this machine")]
    with pytest.raises(Exited):  # a watch that never exits fails here with TimeoutError instead
        asyncio.run(asyncio.wait_for(head_watch.watch_head(services, interval_s=0.05, address=ADDRESS), timeout=20))
    assert watched.exits == [head_watch.EXIT_NO_NODE]
    assert len(watched.joins) >= 3  # tried again through the grace before giving up
    assert any("cannot be reached" in r for r in services.not_ready)  # not ready until the end


def test_other_join_failures_and_a_node_found_late_never_exit(watched):
    services = _services()
    # not up yet, then no node for a while (the head's own node registering), then joined
    watched.outcomes = [RayHeadUnavailable("not up yet"), NoLocalNode("no node yet"), NoLocalNode("no node yet"), None]

    async def run() -> None:
        task = asyncio.create_task(head_watch.watch_head(services, interval_s=0.05, address=ADDRESS))
        await asyncio.sleep(1.5)
        task.cancel()

    asyncio.run(run())
    assert watched.exits == []
    assert len(watched.joins) == 4  # joined at the fourth try, and nothing more to do after
    assert services.not_ready == [] and not ray_runtime.head_lost()


def test_a_join_finding_no_node_here_is_told_apart_from_other_failures():
    def chain(*texts: str) -> BaseException:
        exc = None
        for text in reversed(texts):
            new = RuntimeError(text)
            new.__cause__ = exc
            exc = new
        return exc

    assert _no_local_node(_causes(chain("Failed to connect to Ray cluster", "No node info found for address 10.0.0.5")))
    assert _no_local_node(_causes(chain("Failed to connect to Ray cluster at h:6379: Failed to get node info for "
                                        "possible node ids: {'ac32'} when trying to resolve node to connect to")))
    assert not _no_local_node(_causes(chain("Failed to connect to Ray cluster", "Timed out after 20 s")))

"""Small helpers shared by the background loops and their threads."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading


async def cancel_and_wait(task: asyncio.Task | None) -> None:
    """Cancel a background task and wait until it has really stopped."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def lower_thread_priority(nice: int) -> None:
    """Add ``nice`` to the calling thread's niceness (on Linux each thread has its own, and raising
    it needs no privilege; new threads inherit it). Where threads cannot be reniced, nothing changes."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except (AttributeError, OSError):
        pass

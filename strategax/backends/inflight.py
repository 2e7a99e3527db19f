"""A bound on the programs in flight on XLA:CPU.

With dozens of multi-device programs queued by asynchronous dispatch, XLA's CPU collectives
deadlock: participants of later runs hold the threads an earlier run's rendezvous needs
(reproduced in plain JAX 0.10.2 with 8 simulated devices: ~60 queued `shard_map` steps with a
`pmean` hang; 16 in flight never did). Waiting for the oldest run before queueing more keeps
the device threads free; on CPU the step is compute-bound, so the wait costs nothing.
"""
from __future__ import annotations

import collections

MAX_IN_FLIGHT = 8
_pending: collections.deque = collections.deque()


def throttle(marker) -> None:
    """Remember one output of a CPU run (its smallest: holding big ones would keep their buffers
    from being reused); wait for the oldest run once more than MAX_IN_FLIGHT are queued."""
    _pending.append(marker)
    if len(_pending) > MAX_IN_FLIGHT:
        oldest = _pending.popleft()
        # deleted: donated to a later run, whose wait covers it
        if not oldest.is_deleted() and not oldest.is_ready():
            oldest.block_until_ready()

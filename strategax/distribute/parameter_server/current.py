"""The worker side of pickling: what a coordinator's objects become when a step that uses them
is unpickled in a worker actor (its variables that worker's copies, its strategy the worker's
local strategy). The worker's runtime registers itself here when the actor starts."""
from __future__ import annotations

from ...errors import DistributionRuntimeError

_RUNTIME = []  # the worker runtime of this process (a worker actor), once started


def register(runtime) -> None:
    _RUNTIME[:] = [runtime]


def runtime():
    if not _RUNTIME:
        raise DistributionRuntimeError(
            "an object of a ParameterServerStrategy was unpickled outside its workers",
            "pass strategies, variables and optimizers to coordinator.schedule; do not pickle them yourself")
    return _RUNTIME[0]


def worker_strategy():
    return runtime().strategy


def shadow_of(ref):
    return runtime().shadow_of(ref)


def worker_optimizer(*state):
    return runtime().optimizer_of(*state)


def worker_resource(resource_id: int):
    return runtime().resource(resource_id)

"""The messages of a parameter-server job, typed: what a worker's `run` answers the coordinator
(`Done`, `ServerLost`, `Raised`, each with the slot groups the function made), the updates a
worker sends a server (`Update`: sent as plain tuples, since a server process imports NumPy
only, not strategax) and the per-worker resources the coordinator makes on every worker."""
from __future__ import annotations

from typing import Any, NamedTuple, Union


class SlotGroup(NamedTuple):
    """Optimizer `uid`'s slots made on a worker for the variables `var_keys`, as `slot_refs`."""

    uid: int
    var_keys: list
    slot_refs: list


class Done(NamedTuple):
    """The function ran: its result (as NumPy) and the slot groups it made."""

    result: Any
    created: list[SlotGroup]


class ServerLost(NamedTuple):
    """Parameter server `ps` did not answer (`message` says how); nothing was made."""

    ps: int
    message: str
    created: list[SlotGroup]


class Raised(NamedTuple):
    """The function raised: the pickled error, and the slot groups made before it did."""

    error: bytes
    created: list[SlotGroup]


RunOutcome = Union[Done, ServerLost, Raised]


class Update(NamedTuple):
    """One variable's update a server applies: "assign", "assign_add" or "assign_sub" `value`."""

    var_id: int
    kind: str
    value: Any


class Resource(NamedTuple):
    """A per-worker resource: a dataset (`payload`: a pickled dataset_fn) or an iterator of one
    (`payload`: the dataset's id)."""

    resource_id: int
    kind: str
    payload: Any

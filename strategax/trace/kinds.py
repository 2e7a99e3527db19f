"""What each leaf crossing a compiled function's boundary is: `Kind`, one enum for the input
leaves of a call (`Signature.kinds`) and the output leaves of its result; and the output plan,
one small entry per output leaf saying how the call reads it back from the program's outputs
(built while tracing in `function.py`, rewritten for per-example rows by
`batches/per_example.py`, read back in `compiled.py` and `fast_call.py`)."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar, Union


class Kind(enum.Enum):
    """An input or output leaf's kind (its value is the short tag cache keys show)."""

    PER_REPLICA = "P"  # a per-replica value
    MIRRORED = "M"  # a mirrored value
    ARRAY = "A"  # a plain array (mirrored)
    STATIC = "S"  # a static Python value: a constant of the program
    SCALAR = "W"  # a Python int, float or complex traced as a weakly typed scalar (reduce_retracing)
    PER_EXAMPLE = "E"  # an output with the padded rows of the batch argument: trimmed to the real rows
    KEY = "K"  # an output that is a typed PRNG key: its key data, wrapped again after the call
    TAKEN = "T"  # an output with the rows of a batch taken from an iterator: trimmed likewise
    LOCAL = "L"  # one replica's rows of a per-example output (experimental_local_results)


# Where per-example rows come from: BATCH, the padded batch argument; an int, the ordinal of the
# `next(iterator)` whose batch they are (among the call's single takes); None, no one batch.
Source = Union[str, int, None]


@dataclass(frozen=True)
class Output:
    """Program output `index` read back as `kind` (ARRAY, PER_REPLICA, MIRRORED or PER_EXAMPLE)."""

    kind: Kind
    index: int


@dataclass(frozen=True)
class StaticOutput:
    """A static Python value the function returned: no program output."""

    kind: ClassVar[Kind] = Kind.STATIC
    value: Any


@dataclass(frozen=True)
class KeyOutput:
    """A typed PRNG key: program output `index` holds its key data, wrapped with `impl`."""

    kind: ClassVar[Kind] = Kind.KEY
    index: int
    impl: Any


@dataclass(frozen=True)
class TakenOutput:
    """Program output `index` with the rows of the batch `source` (a take's ordinal) took."""

    kind: ClassVar[Kind] = Kind.TAKEN
    index: int
    source: Source


@dataclass(frozen=True)
class LocalOutput:
    """Replica `replica`'s component of program output `index` (a LocalResult); `source`: whose
    rows to keep (None: not per-example, returned as it is)."""

    kind: ClassVar[Kind] = Kind.LOCAL
    index: int
    replica: int
    source: Source = None


OutputEntry = Union[Output, StaticOutput, KeyOutput, TakenOutput, LocalOutput]

"""A value's sharding over the logical devices of a replica, as it prints after the type.

`split[{}, {l0}, {l1, l2}]`: dimension i is split over the named logical mesh axes (none:
not split); `replicated`: every logical device holds all of it; `device[3]`: it lives on
logical device 3. A value whose sharding is not known prints nothing (left open).
"""
from __future__ import annotations

from dataclasses import dataclass

KINDS = ("split", "replicated", "device")


@dataclass(frozen=True)
class Sharding:
    """How a replica's value is laid out over its logical devices."""

    kind: str
    axes: tuple[tuple[str, ...], ...] = ()  # split: the mesh axes of each dimension
    device: int = 0  # device: the logical device id

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown sharding kind {self.kind!r}")
        object.__setattr__(self, "axes", tuple(tuple(str(a) for a in d) for d in self.axes))

    @classmethod
    def split(cls, axes) -> "Sharding":
        """Split each dimension over its axes; all-empty axes mean replicated."""
        axes = tuple(tuple(d) for d in axes)
        return cls("split", axes) if any(axes) else cls("replicated")

    @property
    def used_axes(self) -> tuple[str, ...]:
        return tuple(a for d in self.axes for a in d)

    def __str__(self) -> str:
        if self.kind == "split":
            return "split[" + ", ".join("{" + ", ".join(d) + "}" for d in self.axes) + "]"
        if self.kind == "device":
            return f"device[{self.device}]"
        return "replicated"


def prime_factors(n: int) -> list[int]:
    """The prime factors of n in ascending order (1 has none)."""
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


def logical_axes(num_logical: int) -> tuple[tuple[str, int], ...]:
    """The logical mesh axes of a replica of `num_logical` devices: one per prime factor."""
    return tuple((f"l{i}", p) for i, p in enumerate(prime_factors(num_logical)))


def assign_axes(partition: tuple[int, ...], axes: tuple[tuple[str, int], ...]) -> tuple[tuple[str, ...], ...]:
    """Mesh axes for each dimension's split count, taken in order (row-major device ids)."""
    free = list(axes)
    out = []
    for count in partition:
        mine = []
        for p in prime_factors(count):
            k = next(i for i, (_, size) in enumerate(free) if size == p)
            mine.append(free.pop(k)[0])
        out.append(tuple(mine))
    return tuple(out)

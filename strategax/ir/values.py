"""SSA values: each defined once (by an op result or a block argument), compared by identity."""
from __future__ import annotations

from .types import TensorType


class Value:
    """One SSA value. `name` is only a hint for the printer; identity is what matters."""

    __slots__ = ("type", "name")

    def __init__(self, type: TensorType, name: str | None = None):
        self.type = type
        self.name = name

    def __repr__(self) -> str:
        return f"Value(%{self.name or '?'}: {self.type})"

"""`iterator.get_next_as_optional()`: TensorFlow's `tf.experimental.Optional`, a batch or nothing,
so a loop can stop at the end of the data without catching an exception."""
from __future__ import annotations

from typing import Any

from ..errors import DistributionValueError


class Optional:
    """A value that may be absent: `has_value()`, `get_value()`, `element_spec`."""

    def __init__(self, value: Any = None, has_value: bool = False, element_spec: Any = None):
        self._value, self._has_value, self._spec = value, has_value, element_spec

    @staticmethod
    def from_value(value: Any, element_spec: Any = None) -> "Optional":
        return Optional(value, True, element_spec)

    @staticmethod
    def empty(element_spec: Any = None) -> "Optional":
        return Optional(None, False, element_spec)

    def has_value(self) -> bool:
        """Whether there is a value (a Python bool)."""
        return self._has_value

    def get_value(self) -> Any:
        """The value; raises when there is none (TensorFlow's InvalidArgumentError)."""
        if not self._has_value:
            raise DistributionValueError("get_value() of an empty Optional: the iterator had no batch left",
                                         "check optional.has_value() before get_value()")
        return self._value

    @property
    def element_spec(self) -> Any:
        return self._spec

    def __repr__(self) -> str:
        return f"Optional(has_value={self._has_value})"

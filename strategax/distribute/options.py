"""`CommunicationOptions` and `CommunicationImplementation`: how collectives are packed, bounded and implemented, as in TensorFlow."""
from __future__ import annotations

import enum
from dataclasses import dataclass


class CommunicationImplementation(enum.Enum):
    """Which collective implementation to use; XLA picks on every backend, so all mean AUTO."""
    AUTO = "AUTO"
    RING = "RING"
    NCCL = "NCCL"


@dataclass(frozen=True)
class CommunicationOptions:
    """`tf.distribute.experimental.CommunicationOptions`: packing and timeout of collectives.

    `bytes_per_pack=0` packs every reduction of one op and group into one bucket; `> 0` closes
    a bucket when the next tensor would take it past that many bytes.
    """
    bytes_per_pack: int = 0
    timeout_seconds: float | None = None
    implementation: CommunicationImplementation = CommunicationImplementation.AUTO

    def __post_init__(self):
        if not isinstance(self.bytes_per_pack, int) or self.bytes_per_pack < 0:
            raise ValueError(f"bytes_per_pack must be a non-negative int, not {self.bytes_per_pack!r}")
        if self.timeout_seconds is not None and self.timeout_seconds <= 0:
            raise ValueError(f"timeout_seconds must be positive, not {self.timeout_seconds!r}")
        if isinstance(self.implementation, str):
            object.__setattr__(self, "implementation", CommunicationImplementation[self.implementation.upper()])

    def merge(self, other: "CommunicationOptions | None") -> "CommunicationOptions":
        """`other`'s non-default fields override this one's (TensorFlow's options merging)."""
        if other is None:
            return self
        default = CommunicationOptions()
        return CommunicationOptions(
            other.bytes_per_pack or self.bytes_per_pack,
            other.timeout_seconds if other.timeout_seconds is not None else self.timeout_seconds,
            other.implementation if other.implementation != default.implementation else self.implementation)

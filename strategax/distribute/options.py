"""`CommunicationOptions` and `CommunicationImplementation`: how collectives are packed, bounded and
implemented, as in TensorFlow."""
from __future__ import annotations

import enum
from dataclasses import dataclass

from ..dialects.collectives import COMPRESSIONS
from ..errors import DistributionTypeError, DistributionValueError, check_int


def check_options(options, api: str) -> None:
    """`options` is None or a CommunicationOptions."""
    if options is not None and not isinstance(options, CommunicationOptions):
        raise DistributionTypeError(f"{api}'s options must be sx.CommunicationOptions or None, not "
                                    f"{type(options).__name__} {options!r:.40}",
                                    "pass sx.CommunicationOptions(bytes_per_pack=...), or leave options out")


class CommunicationImplementation(enum.Enum):
    """Which collective implementation to use; XLA picks on every backend, so all mean AUTO."""
    AUTO = "AUTO"
    RING = "RING"
    NCCL = "NCCL"


@dataclass(frozen=True)
class CommunicationOptions:
    """`tf.distribute.experimental.CommunicationOptions`: packing and timeout of collectives,
    and (strategax's own) compression of the reductions' payload on the wire.

    `bytes_per_pack=0` (the default) lets strategax choose: 64 KiB buckets, measured to compile
    and run no slower than one reduction per tensor (docs/performance.md); `> 0` closes a
    bucket when the next tensor would take it past that many bytes (a value at least the
    gradients' bytes packs them all into one buffer). `compression="bf16"` or
    `"f16"` sends SUM and MEAN reductions of float32/float64 values in that type and casts the
    result back (the `compress-collectives` pass; half the bytes of float32, with the narrow
    type's rounding in the sum); `"none"` turns a strategy's default off for one call.
    """
    bytes_per_pack: int = 0
    timeout_seconds: float | None = None
    implementation: CommunicationImplementation = CommunicationImplementation.AUTO
    compression: str | None = None

    def __post_init__(self):
        check_int(self.bytes_per_pack, "bytes_per_pack", minimum=0)
        c = self.compression
        if c is not None and not isinstance(c, str):
            raise DistributionTypeError(f"compression must be a string or None, not {type(c).__name__} {c!r:.40}",
                                        'pass compression="bf16" (or "f16") to send reductions in that type')
        if c is not None and c.lower() not in COMPRESSIONS + ("none",):
            raise DistributionValueError(f"compression must be one of {', '.join(map(repr, COMPRESSIONS))}, "
                                         f"'none' or None, not {c!r:.40}",
                                         'pass compression="bf16" (or "f16") to send reductions in that type')
        if c is not None:
            object.__setattr__(self, "compression", c.lower())
        t = self.timeout_seconds
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))):
            raise DistributionTypeError(f"timeout_seconds must be a number or None, not {type(t).__name__} {t!r:.40}",
                                        "pass the timeout in seconds, e.g. timeout_seconds=60")
        if t is not None and t <= 0:
            raise DistributionValueError(f"timeout_seconds must be positive, not {t!r}",
                                         "pass a positive number of seconds, or None for no timeout")
        impl = self.implementation
        names = ", ".join(f"sx.CommunicationImplementation.{m}" for m in CommunicationImplementation.__members__)
        if isinstance(impl, str):
            if impl.upper() not in CommunicationImplementation.__members__:
                raise DistributionValueError(f"unknown implementation {impl!r}", f"use one of {names}")
            object.__setattr__(self, "implementation", CommunicationImplementation[impl.upper()])
        elif not isinstance(impl, CommunicationImplementation):
            name = getattr(impl, "name", None)  # TensorFlow's enum
            if not isinstance(name, str) or name not in CommunicationImplementation.__members__:
                raise DistributionTypeError(f"implementation must be a CommunicationImplementation, not "
                                            f"{type(impl).__name__} {impl!r:.40}", f"use one of {names}")
            object.__setattr__(self, "implementation", CommunicationImplementation[name])

    def merge(self, other: "CommunicationOptions | None") -> "CommunicationOptions":
        """`other`'s non-default fields override this one's (TensorFlow's options merging)."""
        if other is None:
            return self
        default = CommunicationOptions()
        return CommunicationOptions(
            other.bytes_per_pack or self.bytes_per_pack,
            other.timeout_seconds if other.timeout_seconds is not None else self.timeout_seconds,
            other.implementation if other.implementation != default.implementation else self.implementation,
            other.compression if other.compression is not None else self.compression)

    @property
    def compress_to(self) -> str | None:
        """The type reductions are sent in ("bf16", "f16"), or None."""
        return None if self.compression in (None, "none") else self.compression

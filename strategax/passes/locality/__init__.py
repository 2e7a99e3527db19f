"""The locality passes: `infer-locality` (per_replica or mirrored for every value) and
`check-locality` (TensorFlow's rules on them, as trace-time errors)."""
from .check_locality import CheckLocality
from .infer_locality import InferLocality

__all__ = ["CheckLocality", "InferLocality"]

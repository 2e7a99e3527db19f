"""Batches inside a compiled function: `next(iterator)` and `for x in dataset` as program inputs
(`takes`, `streams`), `sx.range` loops (`loops`) made one on-device loop (`outline`), and
per-example outputs trimmed to each replica's real rows (`per_example`)."""
from .loops import range  # noqa: A004 - sx.range, like tf.range
from .outline import reroll
from .per_example import LocalResult
from .streams import Streams
from .takes import TraceInputs, element_spec

__all__ = ["LocalResult", "Streams", "TraceInputs", "element_spec", "range", "reroll"]

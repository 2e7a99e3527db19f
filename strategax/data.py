"""`sx.data`: in-memory input spelled as `tf.data` (`sx.data.Dataset.from_tensor_slices((x, y))
.shuffle(n).batch(b)`), to hand to `strategy.experimental_distribute_dataset`, and the names a
tf.data pipeline uses with it (`sx.data.AUTOTUNE`, `sx.data.Options`,
`sx.data.experimental.AutoShardPolicy`)."""
from types import SimpleNamespace

from .input.dataset_options import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, DistributeOptions, Options
from .input.numpy_dataset import Dataset
from .input.options import AutoShardPolicy

experimental = SimpleNamespace(AUTOTUNE=AUTOTUNE, AutoShardPolicy=AutoShardPolicy,
                               DistributeOptions=DistributeOptions,
                               INFINITE_CARDINALITY=INFINITE_CARDINALITY, UNKNOWN_CARDINALITY=UNKNOWN_CARDINALITY)
"""`tf.data.experimental`'s names that tf.distribute code uses."""

__all__ = ["AUTOTUNE", "Dataset", "INFINITE_CARDINALITY", "Options", "UNKNOWN_CARDINALITY", "experimental"]

"""`sx.data`: in-memory input spelled as `tf.data` (`sx.data.Dataset.from_tensor_slices((x, y))
.shuffle(n).batch(b)`), to hand to `strategy.experimental_distribute_dataset`."""
from .input.numpy_dataset import Dataset

__all__ = ["Dataset"]

"""Loss helpers in the spirit of `tf.nn`, aware of padded partial batches (see
`compiler.input_mask`): padded rows count for nothing."""
from .compiler.input_mask import batch_mask, compute_average_loss

__all__ = ["batch_mask", "compute_average_loss"]

"""strategax: TensorFlow's tf.distribute programming model, compiled through JAX/XLA."""
from . import backends, ir, nn, passes
from . import cluster_resolver
from .compiler import *  # noqa: F401,F403  (the public Strategy API)
from .compiler import __all__ as _compiler_all

__version__ = "0.1.0"
__all__ = ["backends", "cluster_resolver", "ir", "nn", "passes", *_compiler_all]

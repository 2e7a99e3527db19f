"""strategax: TensorFlow's tf.distribute programming model, compiled through JAX/XLA.

The packages are the architecture, each importing only those below it (docs/architecture.md):
`ir` → `dialects` → `passes`, `backends` → `trace` → `variables`, `input` → `distribute`;
`cluster` and `tools` beside; `errors` and `_context` under everything."""
from . import backends, cluster_resolver, data, experimental, ir, metrics, nn, passes
from .cluster import WorkerLostError
from . import distribute
from .distribute import *  # noqa: F401,F403  (the public Strategy API)
from .distribute.parameter_server import ParameterServerLostError
from . import keras
from .checkpoint import Checkpoint, CheckpointManager, PreemptionCheckpointHandler, latest_checkpoint
from .errors import (CheckpointError, DistributionRuntimeError, DistributionTypeError, DistributionValueError,
                     InternalError, OutOfRangeError, StrategaxError)
from .input import AutoShardPolicy, DistributedDataset, InputContext, InputOptions, Optional
from .trace import (DistributedValues, Mirrored, PerReplica, StrategyFunction, TensorSpec, import_jaxpr,  # noqa: A004
                    profile, range)
from .variables import (MirroredVariable, Optimizer, SyncOnReadVariable, Variable, VariableAggregation,
                        VariableSynchronization)

from .tools.report import render_report as _render_report
from .trace.inspection import use_renderer as _use_renderer

# f.report() lives in trace/, its HTML in tools/ (a layer above, which trace/ may not import):
# the package hands the renderer down once, here (docs/architecture.md).
_use_renderer(_render_report)

__version__ = "0.1.0"
__all__ = [
    "backends", "cluster_resolver", "data", "experimental", "ir", "keras", "metrics", "nn", "passes",
    "Checkpoint", "CheckpointError", "CheckpointManager", "DistributedDataset", "DistributedValues",
    "DistributionRuntimeError", "DistributionTypeError", "DistributionValueError", "InputContext", "InputOptions",
    "InternalError",
    "Mirrored", "AutoShardPolicy", "MirroredVariable", "Optimizer", "OutOfRangeError", "PerReplica",
    "PreemptionCheckpointHandler",
    "Optional", "ParameterServerLostError", "StrategaxError", "StrategyFunction", "TensorSpec",
    "SyncOnReadVariable", "Variable", "VariableAggregation", "VariableSynchronization",
    "WorkerLostError", "import_jaxpr", "latest_checkpoint", "profile", "range",
]
__all__ += distribute.__all__  # the public Strategy API (a form type checkers follow)

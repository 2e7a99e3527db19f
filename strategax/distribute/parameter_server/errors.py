"""The errors of a parameter-server job."""
from ...errors import DistributionRuntimeError


class ParameterServerLostError(DistributionRuntimeError):
    """A parameter server died (or stopped answering): the variables it held are gone, so
    `join()` and `fetch()` raise this; restart training from the last checkpoint (TensorFlow's
    rule)."""


class WorkersLostError(DistributionRuntimeError):
    """Every worker died and none could be started again: scheduled functions cannot run."""


class ClosureCancelledError(DistributionRuntimeError):
    """A scheduled function did not run because an earlier one failed (TensorFlow cancels the
    functions still queued when one raises)."""

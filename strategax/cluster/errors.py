"""The errors of describing and starting a cluster."""
from ..errors import DistributionRuntimeError, DistributionValueError


class ClusterConfigError(DistributionValueError):
    """TF_CONFIG (or a cluster spec) is malformed: bad JSON, a missing task, a bad index, a bad
    or repeated address."""


class ClusterStartError(DistributionRuntimeError):
    """The job could not start: a worker's port is taken, a worker failed or never came. Every
    worker raises it, naming the worker and the cause."""

"""The error a malformed cluster description raises."""
from ..errors import DistributionValueError


class ClusterConfigError(DistributionValueError):
    """TF_CONFIG (or a cluster spec) is malformed: bad JSON, a missing task, a bad index."""

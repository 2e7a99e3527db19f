"""`TFConfigClusterResolver`: the cluster from the TF_CONFIG environment variable (TensorFlow's JSON)."""
from __future__ import annotations

import json
import os

from .base import ClusterResolver, check_task
from .cluster_spec import ClusterSpec
from .errors import ClusterConfigError

MAX_DEPTH = 16  # TF_CONFIG nests 3 levels ({"cluster": {"worker": [...]}}); far more is not one


def _check_depth(text: str) -> None:
    """Reject JSON nested deeper than MAX_DEPTH before parsing it (json would recurse)."""
    depth, in_string, escaped = 0, False, False
    for i, c in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise ClusterConfigError(
                    f"TF_CONFIG nests more than {MAX_DEPTH} levels of JSON arrays and objects (at character {i})",
                    'set it to {"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": I}}')
        elif c in "]}":
            depth -= 1


def _load_tf_config() -> dict:
    text = os.environ.get("TF_CONFIG", "")
    if not text.strip():
        return {}
    _check_depth(text)
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise ClusterConfigError(
            f"TF_CONFIG is not valid JSON ({e.msg} at line {e.lineno} column {e.colno}): {text[:200]!r}",
            'set it to json.dumps({"cluster": {"worker": [...]}, "task": {"type": "worker", "index": 0}})') from None
    if not isinstance(config, dict):
        raise ClusterConfigError(f"TF_CONFIG must be a JSON object, not {type(config).__name__}: {text[:200]!r}",
                                 'set it to {"cluster": {...}, "task": {...}}')
    return config


class TFConfigClusterResolver(ClusterResolver):
    """Reads `cluster`, `task.type`, `task.index` and `rpc_layer` from TF_CONFIG (read when created)."""

    def __init__(self, task_type: str | None = None, task_id: int | None = None,
                 rpc_layer: str | None = None, environment: str | None = None):
        config = _load_tf_config()
        cluster = config.get("cluster", {})
        task = config.get("task", {})
        if not isinstance(task, dict):
            raise ClusterConfigError(f"TF_CONFIG's \"task\" must be an object, not {task!r}",
                                     'write "task": {"type": "worker", "index": 0}')
        self._spec = ClusterSpec(cluster, source="TF_CONFIG")
        task_type = task.get("type") if task_type is None else task_type
        task_id = task.get("index") if task_id is None else task_id
        if self._spec and task_type is not None and task_id is None and "index" not in task:
            raise ClusterConfigError("TF_CONFIG's task has a type but no index",
                                     'write "task": {"type": "worker", "index": I}')
        self.task_type, self.task_id = check_task(self._spec, task_type, task_id, "TF_CONFIG")
        self.rpc_layer = rpc_layer if rpc_layer is not None else config.get("rpc_layer")
        self.environment = environment if environment is not None else config.get("environment", "")

    def cluster_spec(self) -> ClusterSpec:
        return self._spec

"""How experimental_distribute_dataset shares input between workers (`input/shard.py`), in one
process, against TensorFlow 2.21's own per-worker pipeline (tests/data/tf/multi_worker_input.json);
the real two-worker job is tests/test_multi_worker_safety.py."""
import json
from pathlib import Path

import numpy as np
import pytest

import strategax as sx
from conftest import assert_names_this_line, here
from strategax.input.shard import dataset_policy, worker_policy, worker_steps

RECORDED = json.loads((Path(__file__).parent / "data/tf/multi_worker_input.json").read_text())["scenarios"]
PIPELINE = RECORDED["pipeline_w2_r1"]["result"]["streams"]


def our_steps(name: str, per_worker: int, worker: int) -> list:
    """This worker's per-step local pieces for the recorded dataset NAME (rangeN_bB_POLICY)."""
    size, batch, policy = name.split("_")
    n, b = int(size[len("range"):]), int(batch[1:])
    x = np.arange(n, dtype=np.float32)
    batches = (([x[i:i + b]], len(x[i:i + b])) for i in range(0, n, b))
    policy = worker_policy([], sx.InputOptions(auto_shard_policy=policy))
    return [[piece[0].tolist() for piece in local]
            for local, _ in worker_steps(batches, policy, workers=2, per_worker=per_worker, worker=worker)]


def tf_steps(stream: list, per_worker: int, steps: int) -> list:
    """A recorded worker stream as steps: element k goes to local replica k % R at step k // R;
    a replica past the end of its worker's stream gets an empty batch."""
    padded = stream + [[]] * (steps * per_worker - len(stream))
    return [padded[i:i + per_worker] for i in range(0, len(padded), per_worker)]


@pytest.mark.parametrize("per_worker", [1, 2])
def test_each_worker_gets_tensorflows_pieces_for_every_policy(per_worker):
    # Intent: for 2 workers of 1 and of 2 replicas, DATA/AUTO/OFF give every worker the pieces
    # TensorFlow's own pipeline gives it (rebatch by batch_sizes_for_worker, then auto-shard),
    # in order: for 2 replicas a worker's DATA pieces interleave with the other worker's, and
    # OFF cuts the rows into worker-rotated sizes. Both workers run as many steps as the longer.
    recorded = PIPELINE[str(per_worker)]
    assert len(recorded) == 12
    for name, streams in recorded.items():
        ours = [our_steps(name, per_worker, w) for w in range(2)]
        steps = max(-(-len(s) // per_worker) for s in streams)
        for w in range(2):
            assert ours[w] == tf_steps(streams[w], per_worker, steps), (name, w)


def test_tensorflows_pipeline_reproduces_its_real_two_worker_job():
    # Intent: the recorded pipeline functions are what a real TensorFlow job runs: for one
    # replica per worker they give exactly what each worker of the real two-worker job got.
    real = RECORDED["split_w2"]["result"]["workers"]
    for name, streams in PIPELINE["1"].items():
        for w in range(2):
            assert real[w]["cases"][name] == [[piece] for piece in streams[w]], (name, w)


class FakeTFDataset:
    """Duck-types what strategax reads of a tf.data.Dataset: its batches and its options."""

    def __init__(self, policy):
        self._policy = policy

    def as_numpy_iterator(self):
        return iter([np.arange(4.0)])

    def options(self):
        distribute = type("DistributeOptions", (), {"auto_shard_policy": self._policy})
        return type("Options", (), {"experimental_distribute": distribute})()


def test_the_policy_comes_from_input_options_else_the_datasets_own_options():
    # Intent: sx.InputOptions(auto_shard_policy=...) wins unless AUTO; then a tf.data.Dataset's
    # options().experimental_distribute.auto_shard_policy (TensorFlow's enum values) counts.
    off, data = -1, 2  # tf.data.experimental.AutoShardPolicy.OFF / DATA
    assert dataset_policy(FakeTFDataset(off), sx.InputOptions()) is sx.AutoShardPolicy.OFF
    assert dataset_policy(FakeTFDataset(off), sx.InputOptions(auto_shard_policy="DATA")) is sx.AutoShardPolicy.DATA
    assert dataset_policy(FakeTFDataset(data), sx.InputOptions()) is sx.AutoShardPolicy.DATA
    assert dataset_policy([np.arange(4.0)], sx.InputOptions()) is sx.AutoShardPolicy.AUTO
    assert worker_policy([np.arange(4.0)], sx.InputOptions()) is sx.AutoShardPolicy.DATA
    with pytest.raises(ValueError, match="auto_shard_policy must be one of"):
        sx.InputOptions(auto_shard_policy=3)  # TensorFlow's HINT


def test_file_policy_on_batches_in_memory_names_the_users_line():
    # Intent: FILE needs a dataset read from files; a sequence of batches has none. The error
    # (TensorFlow's is "Found an unshardable source dataset") names the call and the fix.
    with pytest.raises(ValueError) as err:
        line = here(); worker_policy([np.arange(4.0)], sx.InputOptions(auto_shard_policy=sx.AutoShardPolicy.FILE))  # noqa: E702  here() names the line of the call
    assert_names_this_line(err, line)
    assert "no files to shard" in str(err.value) and "AutoShardPolicy.DATA" in str(err.value)

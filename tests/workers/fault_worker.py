"""One worker of a 2-worker job (tests/test_multi_worker_faults.py) that meets a fault outside
any compiled step. Usage: fault_worker.py MODE TIMEOUT_SECONDS CKPT_DIR.

- metric / reduce / save: both workers read a metric's result (a cross-worker read of its
  sync-on-read variables), reduce an eager PerReplica, or save a checkpoint, in a loop; worker 1
  kills itself (SIGKILL) before its 4th one, so worker 0 is left waiting in it.
- absent: worker 0 saves a checkpoint; worker 1 never does (it sleeps), so worker 0 waits for it.
Worker 0 prints "caught NAME: MESSAGE" for the error it gets and re-raises it.
"""
import os
import signal
import sys
import time

import strategax as sx  # before any JAX computation: the strategy joins the cluster first

mode, timeout, ckpt_dir = sys.argv[1], float(sys.argv[2]), sys.argv[3]
strategy = sx.MultiWorkerMirroredStrategy(communication_options=sx.CommunicationOptions(timeout_seconds=timeout))

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

me = strategy.cluster_resolver.task_id
with strategy.scope():
    accuracy = sx.metrics.Mean()
    weights = sx.Variable(np.arange(4, dtype=np.float32))


@strategy.function
def update():
    strategy.run(lambda: accuracy.update_state(jnp.float32(1.0)))


update()
checkpoint = sx.Checkpoint(weights=weights, total=accuracy.total)


def once() -> None:
    if mode == "metric":
        float(accuracy.result())
    elif mode == "reduce":
        ids = strategy.experimental_distribute_values_from_function(
            lambda ctx: jnp.float32(ctx.replica_id_in_sync_group))
        float(strategy.reduce("sum", ids, axis=None))
    else:
        checkpoint.save(ckpt_dir)


if mode == "absent" and me == 1:
    time.sleep(120)  # alive, answering pings, never saving
for i in range(10 ** 6):
    if me == 1 and i == 3:
        print("dying", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    print(f"{mode} {i}", flush=True)
    try:
        once()
    except BaseException as e:
        print(f"caught {type(e).__name__}: {e}", flush=True)
        raise

"""One worker of a job (tests/test_multi_worker_safety.py) whose worker VICTIM dies (SIGKILL) as
the others start compiling their first step. Usage: compile_fault_worker.py VICTIM."""
import os
import signal
import sys

import strategax as sx  # before any JAX computation: the strategy joins the cluster first

strategy = sx.MultiWorkerMirroredStrategy()

import jax.numpy as jnp  # noqa: E402

if strategy.cluster_resolver.task_id == int(sys.argv[1]):
    os.kill(os.getpid(), signal.SIGKILL)


@strategy.function
def first_step():
    def step():
        ctx = sx.get_replica_context()
        return ctx.all_reduce("sum", jnp.float32(ctx.replica_id_in_sync_group))
    return strategy.run(step)


print("compiling", flush=True)
first_step()
print("finished", flush=True)

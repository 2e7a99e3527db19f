"""A process that saves sx.Checkpoints into a shared directory (launched by
tests/test_checkpoint_concurrency.py).

Usage: ckpt_saver.py DIR WRITER COUNT SIZE. Saves COUNT checkpoints (COUNT <= 0: until killed)
of one float32 variable of SIZE elements, every element WRITER * 1000 + i at the i-th save,
printing "saved PATH VALUE" once each save has returned.
"""
import sys

import numpy as np

import strategax as sx

directory, writer, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
v = sx.Variable(np.zeros(size, np.float32))
checkpoint = sx.Checkpoint(v=v)
i = 0
while count <= 0 or i < count:
    value = writer * 1000 + i
    v.assign(np.full(size, value, np.float32))
    print(f"saved {checkpoint.save(directory)} {value}", flush=True)
    i += 1

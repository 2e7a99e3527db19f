"""Checkpoints on orbax-checkpoint: `Checkpoint` (save/restore, checked before anything
changes), `latest_checkpoint`, `CheckpointManager` (numbered checkpoints, `max_to_keep`, async
saves) and `PreemptionCheckpointHandler` (save at the next step on SIGTERM, resume after)."""
from .checkpoint import Checkpoint
from .manager import CheckpointManager
from .paths import latest_checkpoint
from .preemption import PreemptionCheckpointHandler
from .status import CheckpointLoadStatus

__all__ = ["Checkpoint", "CheckpointLoadStatus", "CheckpointManager", "PreemptionCheckpointHandler",
           "latest_checkpoint"]

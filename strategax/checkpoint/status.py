"""What `Checkpoint.restore` returns, as in TensorFlow: a status to assert on.

strategax restores every object of the Checkpoint or raises (`CheckpointError`), so the only
thing left to report is what the file held that no object took (a Checkpoint of the model
alone restoring a training checkpoint): `assert_consumed()` fails on it, `expect_partial()`
says it is intended.
"""
from __future__ import annotations


class CheckpointLoadStatus:
    """The result of restoring `path`: `unused` names the entries no object took."""

    def __init__(self, path: str, matched: int, unused: list[str]):
        self.path, self.matched, self.unused = path, matched, unused

    def assert_consumed(self) -> "CheckpointLoadStatus":
        """Every value in the checkpoint was restored into an object (and every object restored)."""
        if self.unused:
            shown = ", ".join(self.unused[:10]) + (" ..." if len(self.unused) > 10 else "")
            raise AssertionError(f"checkpoint {self.path} holds {len(self.unused)} values no object "
                                 f"of this Checkpoint took: {shown}")
        return self

    def assert_existing_objects_matched(self) -> "CheckpointLoadStatus":
        """Every object of the Checkpoint was restored (always true once restore returned)."""
        return self

    def assert_nontrivial_match(self) -> "CheckpointLoadStatus":
        """Something was restored."""
        if not self.matched:
            raise AssertionError(f"nothing was restored from checkpoint {self.path}")
        return self

    def expect_partial(self) -> "CheckpointLoadStatus":
        """Say that values left unused in the checkpoint are intended."""
        return self

    def __repr__(self) -> str:
        return f"CheckpointLoadStatus({self.path!r}, restored={self.matched}, unused={len(self.unused)})"


class InitializationOnlyStatus(CheckpointLoadStatus):
    """`restore(None)`: nothing is restored, the objects keep their values."""

    def __init__(self):
        super().__init__("None", 0, [])

    def _nothing(self):
        raise AssertionError("No checkpoint specified (save_path=None); nothing is being restored.")

    def assert_consumed(self):
        self._nothing()

    def assert_existing_objects_matched(self):
        self._nothing()

    def assert_nontrivial_match(self):
        self._nothing()

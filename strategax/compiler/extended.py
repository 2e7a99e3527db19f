"""`strategy.extended`: the StrategyExtended API (devices and policy attributes so far)."""
from __future__ import annotations


class StrategyExtended:
    """Additional APIs for algorithms that need to be distribution-aware."""

    def __init__(self, strategy):
        self._strategy = strategy

    @property
    def worker_devices(self) -> tuple:
        return tuple(self._strategy._devices)

    @property
    def parameter_devices(self) -> tuple:
        return tuple(self._strategy._devices)

    experimental_require_static_shapes = False
    experimental_between_graph = False
    should_checkpoint = True
    should_save_summary = True
    experimental_should_init = True

    def call_for_each_replica(self, fn, args=(), kwargs=None):
        """Same as `strategy.run`."""
        return self._strategy.run(fn, args, kwargs)

"""Example passes: the code docs/passes.md ("Adding a pass") walks through, registered and
tested like any other pass but not in the default pipeline."""

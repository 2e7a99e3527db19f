"""Passes over the IR, one per file, found by name through the lazy `PASSES` table."""
from .manager import (DEFAULT_PIPELINE, PASSES, Pass, PassFailure, PassLookupError, PassManager,
                      default_pipeline, get_pass, parse_pipeline)

__all__ = ["DEFAULT_PIPELINE", "PASSES", "Pass", "PassFailure", "PassLookupError", "PassManager",
           "default_pipeline", "get_pass", "parse_pipeline"]

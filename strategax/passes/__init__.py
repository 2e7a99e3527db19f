"""Passes over the IR, one per file, found by name through the lazy `PASSES` table."""
from .manager import (DEFAULT_PIPELINE, PASSES, Pass, PassFailure, PassLookupError, PassManager,
                      PassOptionError, PassOrderError, default_pipeline, get_pass, parse_pipeline, pass_options)

__all__ = ["DEFAULT_PIPELINE", "PASSES", "Pass", "PassFailure", "PassLookupError", "PassManager",
           "PassOptionError", "PassOrderError", "default_pipeline", "get_pass", "parse_pipeline", "pass_options"]

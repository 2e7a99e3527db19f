"""Seeing a compiled function: its statistics with memory (`f.stats()`), the HLO's metadata
read back, profiles (`sx.profile`) and the report's data (`f.report()`)."""
from .hlo_metadata import OpMetadata, hlo_metadata, ir_op_of
from .memory import MemoryStats, memory_stats
from .profile import Profile, ProfileRow, profile
from .report import ReportData, build_report, compiled_report, report_data, use_renderer
from .report import render as render_report
from .stats import StepStats

__all__ = ["MemoryStats", "OpMetadata", "Profile", "ProfileRow", "ReportData", "StepStats", "build_report",
           "compiled_report", "hlo_metadata", "ir_op_of", "memory_stats", "profile", "render_report", "report_data",
           "use_renderer"]

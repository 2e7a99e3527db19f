"""Command-line tools: `strategax-opt` (run passes on IR text) and `strategax-dump`."""

"""Capture: drive torch.compile through ``dynscope._torch`` and assemble what it did into a Report.

backend (the recording backend) -> capture (report(), capture()) -> assemble (trace events ->
model), with break sites and fixes, coverage, lowering, timing and advise beside them.
"""

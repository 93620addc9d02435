"""Capture: drive torch.compile through ``dynscope._torch`` and hand what it did to the builder.

backend (the recording backend) -> capture (report(), capture()) -> ``dynscope._read.assemble``
(trace events -> model; the same builder a TORCH_TRACE log goes through), with timing, memory,
export, the live rank watch, advise and fix beside them.
"""

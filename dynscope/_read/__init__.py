"""Reading: what PyTorch recorded, folded into a Report, with no torch imported.

trace_file / reading (a TORCH_TRACE log or a saved report in) -> trace_report (one log's
records) -> assemble (records -> the model: frames, graphs, breaks with their sites
(break_sites), recompiles, lowering (below Dynamo), coverage). Live capture
(``dynscope._capture``) feeds the same builder; nothing here imports torch or capture
(tests/house/test_import_graph.py imports every module in a fresh process and checks).
"""

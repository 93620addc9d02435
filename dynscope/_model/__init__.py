"""The model: frozen plain data (no torch objects), its JSON codec, budgets, diffs, merges and
the analyses that draw nothing. Imports nothing above it except the one deferred door into
``dynscope._render`` that the output shortcuts go through."""

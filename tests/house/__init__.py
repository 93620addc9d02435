"""Tests of the package as a whole: lint, layering and the import graph, the architecture figures, the wheel."""

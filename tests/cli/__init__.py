"""Tests of the front ends: the command line, the pytest plugin and assert_compiles, the public API, the examples."""

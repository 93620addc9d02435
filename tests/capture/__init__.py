"""Tests of dynscope/_capture: live compiles under report(), capture(), timing, memory, export, advise, watch."""

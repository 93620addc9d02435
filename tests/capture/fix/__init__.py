"""Tests of dynscope/_capture/fix: dynscope.fix's rewrites, verification and --write."""

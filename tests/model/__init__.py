"""Tests of dynscope/_model: the plain-data model, its codec, budgets, diffs and causes."""

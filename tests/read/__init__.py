"""Tests of dynscope/_read: stored TORCH_TRACE logs and saved reports read into reports, torch-free."""

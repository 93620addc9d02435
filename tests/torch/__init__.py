"""Tests of dynscope/_torch and dynscope/_lexicon: PyTorch's private APIs, text formats and record kinds."""

"""Private torch names dynscope writes into the user's code (``fix``'s rewrites), spelled here
with the rest of what dynscope knows of torch's private API, so a new release is checked for
them in one place (tests/torch/test_spelled.py). Plain strings: no torch import."""

from __future__ import annotations

__all__ = ["ASYNC_ASSERT"]

# A check on a tensor kept in the graph: raises RuntimeError with the message in eager and
# compiled code alike (asynchronously on a GPU); Dynamo traces an ``assert`` on a tensor into it.
ASYNC_ASSERT = "torch._assert_async"

"""What PyTorch's names and messages mean, as plain text rules: a leaf every floor may read.

Nothing here imports torch or any other part of dynscope, so the model and the renderers
can tell a resume function or an on-purpose break apart without reaching into ``_torch/``
(which calls PyTorch). Each rule says which torch releases it was checked on.

- ``wording``: Dynamo's generated names and phrases (resume functions, lifted parameters,
  "gave up on the frame", the recompile limit) and the rank-local parts of a guard;
- ``break_categories``: which category a graph break's words fall in.
"""

"""Rules about the wording and names Dynamo uses (no torch import: plain text rules)."""

from __future__ import annotations

import re

#: torch 2.14 logs a second break payload for the same event when it gives up on a frame.
_SECONDARY_BREAK = "Failed to handle graph break gracefully"


def is_secondary_break(gb_type: str) -> bool:
    """True for a payload on which Dynamo gave up on the whole frame ("Failed to handle graph
    break gracefully"): a record of its own, in the frame that broke again (torch 2.11-2.14)."""
    return gb_type.strip().startswith(_SECONDARY_BREAK)


def is_recompile_limit(fail_reason: str) -> bool:
    """True when a frame's compile failed because Dynamo's recompile limit was hit.

    torch 2.5 .. 2.14: ``fail_reason`` "Unsupported: Dynamo recompile limit exceeded"
    (older releases said "cache_size_limit reached").
    """
    text = fail_reason.lower()
    return "recompile limit" in text or "cache_size_limit" in text or "recompile_limit" in text


#: Dynamo names the functions it generates to resume after a break
#: "torch_dynamo_resume_in_<function>_at_<line>" (torch 2.0 .. 2.14).
RESUME_PREFIX = "torch_dynamo_resume_in_"


def is_resume_name(function: str) -> bool:
    """True for a resume function Dynamo generated after a graph break."""
    return function.startswith(RESUME_PREFIX)


def resume_label(function: str) -> str:
    """"resume forward_at_16" for a resume function's name; other names unchanged."""
    return "resume " + function[len(RESUME_PREFIX):] if is_resume_name(function) else function


def base_function(function: str) -> str:
    """The user's function a frame name stands for: "forward" for "Attention.forward" and for
    "torch_dynamo_resume_in_Attention.forward_at_16" (PyTorch's names; dynscope's own label,
    :func:`resume_label`, is made from them for people and never read back)."""
    while is_resume_name(function):  # a resume function's resume names it again
        head, sep, line = function[len(RESUME_PREFIX):].rpartition("_at_")
        function = head if sep and line.isdigit() else function[len(RESUME_PREFIX):]
    return function.rsplit(".", 1)[-1]


def resume_site(function: str) -> tuple[str, int]:
    """(the function, the line) a resume function continues after: ("forward", 16) for
    "torch_dynamo_resume_in_forward_at_16" (its outermost resume); ("", 0) for other names."""
    if not is_resume_name(function):
        return "", 0
    _, _, line = function.rpartition("_at_")
    return base_function(function), int(line) if line.isdigit() else 0


def is_lifted_param(placeholder_name: str) -> bool:
    """True for a graph input Dynamo lifted from a module's parameters or buffers.

    Dynamo names them after their source, e.g. ``L_self_modules_fc_parameters_weight_``;
    torch.export's program names them ``p_fc_weight`` (parameters), ``b_bn_running_mean``
    (buffers) and ``c_...`` (lifted constants), prefixes Dynamo never gives an input (its
    names start with ``l_``/``L_`` or are symbols such as ``s77``).
    """
    return (
        "_parameters_" in placeholder_name
        or "_buffers_" in placeholder_name
        or placeholder_name.startswith(("p_", "b_", "c_"))
    )


#: The reason dynscope gives the cache entries it makes inert after a report; Dynamo may
#: quote it among the failed guards of a later recompile. Not the user's recompile.
DROPPED_REASON = "dropped by dynscope after its report"


def is_dropped_entry_reason(reason: str) -> bool:
    """True for a failed-guard line that only names an entry dynscope made inert."""
    return DROPPED_REASON in reason


#: The logger of PyTorch's structured compile trace (TORCH_TRACE, tlparse), torch 2.2 .. 2.14.
TRACE_LOGGER_NAME = "torch.__trace"


#: What differs between the ranks of one job without meaning anything, in PyTorch's guard
#: text: a tensor's device index (rank 1 guards ``device=1`` where rank 0 has ``device=0``;
#: ``cuda:1``), object ids and addresses (``___check_obj_id(G['torch'], 140651702433840)``),
#: the user line PyTorch appends as a comment (``  # x = f(y)  # model.py:12 in forward``),
#: a guard's measured latency, and the names Dynamo numbers process-wide for the globals it
#: installs (``G['__builtins_dict___2']``: a rank that compiled one function more numbers on).
_RANK_LOCAL = (
    (re.compile(r"\b(__builtins_dict|___odict_getitem|__closure_cell)_+\d+\b"), r"\1___#"),
    (re.compile(r"\s+#\s.*$"), ""),
    (re.compile(r"\bdevice=\d+\b"), "device=#"),
    (re.compile(r"\b(cuda|xpu|hpu|mps|npu):\d+\b"), r"\1:#"),
    (re.compile(r"0x[0-9a-fA-F]+|\b\d{6,}\b"), "#"),
    (re.compile(r"\blatency[^,;)]*", re.IGNORECASE), "latency #"),
)


def without_rank_local(text: str) -> str:
    """Guard text with what is rank-local replaced by ``#``, for comparing ranks: two ranks
    of a clean job give the same text."""
    for pattern, repl in _RANK_LOCAL:
        text = pattern.sub(repl, text)
    return text

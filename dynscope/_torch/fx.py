"""Turn a live FX GraphModule (or the trace's graph code) into plain model data.

Node metadata read (torch 2.1 .. 2.14): ``example_value`` (a FakeTensor or SymInt),
``nn_module_stack`` ({key: (path, class)}), ``stack_trace`` (the user's source lines).
Graphs known only from the trace are read from ``dynamo_output_graph``'s printed code
(``GraphModule.print_readable`` with annotations such as ``"f32[4, 8][8, 1]cpu"``), the
same on 2.11, 2.13 and 2.14 (tests/traces).
"""

from __future__ import annotations

import functools
import itertools
import re
from collections import Counter
from dataclasses import replace
from typing import Any

import torch

from dynscope._model import Node, TensorMeta
from dynscope._torch.graph_text import public_name

_OPS = ("call_function", "call_method", "call_module")


def meta_of(value: Any) -> TensorMeta:
    """TensorMeta for a tensor, SymInt, Python scalar or anything else."""
    if isinstance(value, torch.Tensor):
        try:
            stride: tuple[int | str, ...] = tuple(_dim(s) for s in value.stride())
        except (RuntimeError, NotImplementedError):  # sparse / nested tensors
            stride = ()
        return TensorMeta(
            kind="tensor",
            shape=tuple(_dim(s) for s in value.shape),
            dtype=str(value.dtype).removeprefix("torch."),
            device=str(value.device),
            stride=stride,
            requires_grad=bool(value.requires_grad),
        )
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return TensorMeta(kind="symint", value=str(value))
    if isinstance(value, bool):
        return TensorMeta(kind="bool", value=str(value))
    if isinstance(value, int):
        return TensorMeta(kind="int", value=str(value))
    if isinstance(value, float):
        return TensorMeta(kind="float", value=repr(value))
    return TensorMeta(kind="other", value=type(value).__name__)


def _dim(size: Any) -> int | str:
    # Never int() a SymInt: that would add a guard and specialise the graph we watch.
    if isinstance(size, torch.SymInt):
        text = str(size)  # symbolic size such as "s77"; a SymInt pinned to a constant prints it
        return int(text) if text.lstrip("-").isdigit() else text
    return int(size)


def input_meta(value: Any, example_value: Any = None) -> TensorMeta:
    """TensorMeta of one example input the backend got, with the graph's view of it.

    ``value`` is what Dynamo passed (a real tensor of the compiling call, or a SymInt);
    ``example_value`` is the placeholder's ``example_value`` (a FakeTensor whose symbolic
    dims carry their symbol). A tensor with symbolic dims gets its symbolic shape and
    strides, and the sizes it ran at (``ran_at``); a symint gets its value. The same
    description as :func:`inputs_from_code` gives a graph known only from the trace.
    """
    m = meta_of(value)
    if m.kind == "tensor":
        graph_view = example_value if isinstance(example_value, torch.Tensor) and example_value.dim() == value.dim() else value
        shape = tuple(_dim(s) for s in graph_view.shape)
        if all(isinstance(d, int) for d in shape):
            return m
        try:
            stride: tuple[int | str, ...] = tuple(_dim(s) for s in graph_view.stride())
        except (RuntimeError, NotImplementedError):  # sparse / nested tensors
            stride = m.stride
        return replace(m, shape=shape, stride=stride, ran_at=_hints(value.shape))
    if isinstance(value, torch.SymInt):
        return replace(m, ran_at=_hints((value,)))
    if isinstance(example_value, torch.SymInt) and type(value) is int:
        return TensorMeta(kind="symint", value=str(example_value), ran_at=(value,))
    return m


def _hints(sizes: Any) -> tuple[int, ...]:
    """Concrete sizes (SymInts by their hint, without a guard); () when one has no hint
    (an unbacked size: data-dependent, no value to show)."""
    try:
        return tuple(int(concrete(s)) for s in sizes)
    except (TypeError, ValueError, RuntimeError, AttributeError):
        return ()


def concrete(value: Any) -> Any:
    """A SymInt's concrete size hint (the value of the call being compiled), without
    adding a guard; anything else unchanged. Timing runs graphs on these values."""
    if not isinstance(value, torch.SymInt):
        return value
    node: Any = value.node  # typed SymNode on 2.14+; the hint attributes differ by release
    hint = getattr(node, "_hint", None)
    if hint is not None:
        return int(hint)
    from torch.fx.experimental import symbolic_shapes as ss

    # The hint API was renamed across releases: hint_int (<= 2.12), optimization_hint (2.13+).
    for name in ("optimization_hint", "hint_int"):
        fn = getattr(ss, name, None)
        if fn is not None:
            return int(fn(value))
    return int(node.hint)  # pragma: no cover - older releases


def has_symbolic_inputs(gm: torch.fx.GraphModule) -> bool:
    """True when Dynamo compiled the graph with symbolic sizes (dynamic shapes)."""
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        ev = node.meta.get("example_value")
        if isinstance(ev, torch.SymInt):
            return True
        if isinstance(ev, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in ev.shape):
            return True
    return False


def outputs_need_grad(gm: torch.fx.GraphModule) -> bool:
    """True when an output required grad when Dynamo captured the graph (a training graph)."""
    for node in gm.graph.nodes:
        if node.op != "output":
            continue
        outs: list[torch.fx.Node] = []
        torch.fx.node.map_arg(node.args, outs.append)
        return any(
            isinstance(ev := n.meta.get("example_value"), torch.Tensor) and bool(ev.requires_grad) for n in outs
        )
    return False


def written_inputs(gm: torch.fx.GraphModule) -> list[int]:
    """Positions of the inputs the graph writes to (``x.add_(1)``, ``cache.index_copy_(...)``).

    Dynamo traced the graph on fake tensors, its placeholders' ``example_value``: each
    in-place op on an input or a view of it bumped that fake tensor's version counter.
    (An op that writes inside its kernel without an in-place call, BatchNorm's running
    statistics, does not show here: its outputs never read what it writes.)
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return [
        i
        for i, node in enumerate(placeholders)
        if isinstance(ev := node.meta.get("example_value"), torch.Tensor) and ev._version > 0  # a private counter (torch 2.0 .. 2.14)
    ]


def target_name(node: torch.fx.Node) -> str:
    """Readable text for what a node calls ("torch.sin", "add", "torch.nn.functional.linear")."""
    target = node.target
    if isinstance(target, str):
        return target  # method name, module path or placeholder name
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", None) or str(target)
    return public_name(module, name)


def _outputs(node: torch.fx.Node) -> tuple[TensorMeta, ...]:
    value = node.meta.get("example_value", node.meta.get("val"))
    if value is None:
        return ()
    if isinstance(value, (tuple, list)):
        return tuple(meta_of(v) for v in value if v is not None)
    return (meta_of(value),)


def _module_stack(node: torch.fx.Node) -> tuple[tuple[str, str], ...]:
    stack = node.meta.get("nn_module_stack") or {}
    out = []
    for path, cls in stack.values():
        cls_name = cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
        out.append((_clean_path(str(path)), cls_name.rsplit(".", 1)[-1]))
    return tuple(out)


_SELF_PREFIX = re.compile(r"^L\['self'\]\.?")
_MODULES_ITEM = re.compile(r"\._modules\['([^']+)'\]")
_INDEX_ITEM = re.compile(r"\[(\d+)\]")
_KEY_ITEM = re.compile(r"\['([^']+)'\]")


@functools.lru_cache(maxsize=4096)
def _clean_path(path: str) -> str:
    """L['self'].encoder.layers[0] -> encoder.layers.0 (how users name submodules).

    Cached: every node of a module repeats its ancestors' paths, so a graph of a few hundred
    nodes would clean the same few dozen paths thousands of times."""
    path = _SELF_PREFIX.sub("", path)
    path = _MODULES_ITEM.sub(r".\1", path)
    path = _INDEX_ITEM.sub(r".\1", path)
    path = _KEY_ITEM.sub(r".\1", path)
    return path.strip(".")


_STACK_ENTRY = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n\s*(?P<code>[^\n]*)')


_STACKS_KEPT = 8


def _last_entry(trace: str) -> re.Match[str] | None:
    """The last stack entry of a node's ``stack_trace``: read from the last ``File "`` that
    starts a line (the innermost frame) rather than scanning a deep stack from its top;
    the whole text is scanned only when that one does not read as an entry."""
    at = trace.rfind('File "')
    if at >= 0 and not trace[trace.rfind("\n", 0, at) + 1 : at].strip():
        last = _STACK_ENTRY.match(trace, at)
        if last is not None:
            return last
    entries = list(_STACK_ENTRY.finditer(trace))
    return entries[-1] if entries else None


def _source(node: torch.fx.Node) -> tuple[str, int, str]:
    last = _last_entry(node.meta.get("stack_trace") or "")
    if last is None:
        return "", 0, ""
    return last["file"], int(last["line"]), last["code"].strip()


def extract(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> dict[str, Any]:
    """Plain data of one captured graph: nodes, inputs, op counts (code comes from the trace)."""
    nodes: list[Node] = []
    ops: Counter[str] = Counter()
    # The outer ends of the nodes' stacks ((file, line), outermost first): which function
    # a decorator's wrapper frame ran (dynscope._read.break_sites.wrapped_function). A few distinct ones.
    stacks: list[list[tuple[str, int]]] = []
    for node in gm.graph.nodes:
        target = target_name(node)
        if node.op in _OPS:
            ops[target] += 1
            if len(stacks) < _STACKS_KEPT:
                entries = _STACK_ENTRY.finditer(node.meta.get("stack_trace") or "")
                head = [(e["file"], int(e["line"])) for e in itertools.islice(entries, 8)]
                if head and head not in stacks:
                    stacks.append(head)
        filename, lineno, code = _source(node)
        nodes.append(
            Node(
                name=node.name,
                op=node.op,
                target=target,
                args=tuple(a.name for a in node.all_input_nodes),
                outputs=_outputs(node),
                module_stack=_module_stack(node),
                filename=filename,
                lineno=lineno,
                source=code,
            )
        )
    return {
        "nodes": tuple(nodes),
        "node_count": len(nodes),
        "op_count": sum(ops.values()),
        "op_counts": tuple(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        "inputs": _inputs(gm, example_inputs),
        "stacks": stacks,
    }


def _inputs(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> tuple[TensorMeta, ...]:
    """The example inputs' metadata, each read with its placeholder's ``example_value``
    (when the two line up one to one)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        return tuple(meta_of(x) for x in example_inputs)
    return tuple(
        input_meta(x, p.meta.get("example_value")) for x, p in zip(example_inputs, placeholders, strict=True)
    )



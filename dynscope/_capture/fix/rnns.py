"""Calls of ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` modules as their recurrence, step by step, with the module's own weights.

Dynamo does not trace PyTorch's recurrent modules (their fused kernels sit behind a setting that is
off by default, ``allow_rnn``): every call of one breaks the graph, in the encoders and decoders of
captioning, OCR, trajectory and forecasting models. The same recurrence written out with the
module's own parameters (its ``all_weights``: per layer and direction ``weight_ih``, ``weight_hh``,
their biases; gates in the order the module keeps them: i, f, g, o for an LSTM, r, z, n for a GRU)
is plain tensor code that Dynamo traces, and gradients reach the same parameters:

- ``recurrent module unrolled with its own weights``: ``out, (h, c) = self.lstm(x, (h0, c0))``,
  where the class's ``__init__`` makes ``self.lstm = nn.LSTM(...)``, as ``out, (h, c) =
  self._unrolled_rnn(self._lstm_held, x, (h0, c0), self.training)``. Dynamo breaks wherever it
  meets the module object itself (an attribute read of it too), so the class keeps, beside it,
  its mode, parameters and settings (``self._lstm_held``, set at the end of ``__init__``: the
  same parameter objects, which ``load_state_dict`` and ``.to()`` update in place), and a static
  method of the class runs the recurrence. Layers, both directions, ``batch_first``, unbatched
  inputs, projections and a missing state are handled as the module handles them; every such
  call in the class is rewritten in the one patch, and its ``self.rnn.flatten_parameters()``
  statements dropped (they pack the weights for cuDNN's kernel, which the recurrence written
  out does not use; Dynamo breaks on them as on any use of the module). The module may be made
  by a class a setting picks (``rnn_cls = nn.LSTM if rnn_type == "LSTM" else nn.GRU``). fix runs copies of a model whose
  ``__init__`` ran before the patch: the verifier runs the statements the patch appends to
  ``__init__`` on each copy of the class (``verify._init_ran_again``).

Dropout between layers of a training module is drawn by ``torch.nn.functional.dropout``: on the
CPU the fused kernel draws with the same dropout over the same generator (the same mask, as the
verifier's runs show); cuDNN draws its own, so on a GPU the two differ as two draws do. A packed
sequence is no tensor: the helper raises on it, and the verifier refuses the patch. Text only (no
torch import).
"""

from __future__ import annotations

import ast
import copy

from dynscope._capture.fix.statements import (
    Made,
    Text,
    block_of,
    imports_torch,
    parsed,
    text_before,
    unparsed,
)

__all__ = ["UNROLLED", "unrolled_recurrence"]

UNROLLED = "recurrent module unrolled with its own weights"

_KINDS = ("LSTM", "GRU", "RNN")

# The static method written into the user's class; it reads only what the class holds beside the
# module: (mode, all_weights, num_layers, bidirectional, batch_first, proj_size, dropout, bias).
_HELD = ("(self.{0}.mode, self.{0}.all_weights, self.{0}.num_layers, self.{0}.bidirectional,\n"
         "{1}self.{0}.batch_first, self.{0}.proj_size, self.{0}.dropout, self.{0}.bias)")

_HELPER = '''\
@staticmethod
def _unrolled_rnn(held, x, state=None, training=False):
    """A call of an ``nn.LSTM``, ``nn.GRU`` or ``nn.RNN``, step by step with its own weights
    (``held``: its mode, all_weights and settings). Written by dynscope.fix: torch.compile does not
    trace those modules."""
    mode, weights, num_layers, bidirectional, batch_first, proj_size, dropout, bias = held
    if batch_first and x.dim() == 3:
        x = x.transpose(0, 1)
    batched = x.dim() == 3
    if not batched:
        x = x.unsqueeze(1)
    dirs = 2 if bidirectional else 1
    h0, c0 = state if mode == "LSTM" and state is not None else (state, None)
    if h0 is None:
        h0 = x.new_zeros(num_layers * dirs, x.size(1), weights[0][1].size(1))
    elif not batched:
        h0 = h0.unsqueeze(1)
    if mode == "LSTM" and c0 is None:
        c0 = x.new_zeros(num_layers * dirs, x.size(1), weights[0][1].size(0) // 4)
    elif mode == "LSTM" and not batched:
        c0 = c0.unsqueeze(1)
    hs, cs = [], []
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            w = weights[layer * dirs + d]
            h = h0[layer * dirs + d]
            c = c0[layer * dirs + d] if mode == "LSTM" else None
            steps = range(x.size(0) - 1, -1, -1) if d else range(x.size(0))
            out = [None] * x.size(0)
            for t in steps:
                gi, gh = x[t] @ w[0].t(), h @ w[1].t()
                if bias:
                    gi, gh = gi + w[2], gh + w[3]
                if mode == "LSTM":
                    i, f, g, o = (gi + gh).chunk(4, 1)
                    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                    h = torch.sigmoid(o) * torch.tanh(c)
                    if proj_size:
                        h = h @ w[-1].t()
                elif mode == "GRU":
                    i_r, i_z, i_n = gi.chunk(3, 1)
                    h_r, h_z, h_n = gh.chunk(3, 1)
                    r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
                    n = torch.tanh(i_n + r * h_n)
                    h = (1 - z) * n + z * h
                else:
                    h = torch.tanh(gi + gh) if mode == "RNN_TANH" else torch.relu(gi + gh)
                out[t] = h
            outs.append(torch.stack(out))
            hs.append(h)
            cs.append(c)
        x = torch.cat(outs, 2) if dirs == 2 else outs[0]
        if dropout and training and layer < num_layers - 1:
            x = torch.nn.functional.dropout(x, dropout, True)
    h_n = torch.stack(hs)
    if not batched:
        x, h_n = x.squeeze(1), h_n.squeeze(1)
    elif batch_first:
        x = x.transpose(0, 1)
    if mode != "LSTM":
        return x, h_n
    c_n = torch.stack(cs)
    return x, (h_n, c_n.squeeze(1) if not batched else c_n)
'''


def _recurrent_class(node: ast.expr, local: dict[str, ast.expr], depth: int = 0) -> bool:
    """``nn.LSTM``, ``torch.nn.GRU``, ``RNN``; ``nn.LSTM if rnn_type == "LSTM" else nn.GRU``; or a
    local name bound once to one of those (``rnn_cls``, as bottom-up-attention-vqa picks it)."""
    if isinstance(node, ast.IfExp):
        return _recurrent_class(node.body, local, depth) and _recurrent_class(node.orelse, local, depth)
    if isinstance(node, ast.Name) and node.id in local and depth < 2:
        return _recurrent_class(local[node.id], local, depth + 1)
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
    return name in _KINDS


def _recurrent(node: ast.expr, local: dict[str, ast.expr]) -> bool:
    """``nn.LSTM(...)``, ``torch.nn.GRU(...)``, ``rnn_cls(...)``: a recurrent module made."""
    return isinstance(node, ast.Call) and _recurrent_class(node.func, local)


def _bound_once(fn: ast.AST) -> dict[str, ast.expr]:
    """The function's local names bound once, by a plain assignment: name -> value."""
    values: dict[str, list[ast.expr]] = {}
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    values.setdefault(t.id, []).append(n.value)
    return {k: v[0] for k, v in values.items() if len(v) == 1}


def _made_here(cls: ast.ClassDef) -> dict[str, list[ast.Assign]]:
    """``self.<attr> = nn.LSTM(...)`` in the class: attribute -> the assignments that bind it, for
    an attribute the class binds only to recurrent modules (an LSTM or a GRU by a setting, as
    mmocr's SAR does), each alone (bound to anything else too, it may hold another module)."""
    bound: dict[str, list[tuple[ast.Assign, dict[str, ast.expr]]]] = {}
    for fn in (n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        local = _bound_once(fn)
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        bound.setdefault(t.attr, []).append((n, local))
    return {attr: [a for a, _ in made] for attr, made in bound.items()
            if all(len(a.targets) == 1 and _recurrent(a.value, local) for a, local in made)}


def _flattening(node: ast.AST, made: dict[str, list[ast.Assign]]) -> bool:
    """``self.rnn.flatten_parameters()`` as a statement, of a recurrent attribute: it packs the
    weights for cuDNN's kernel, which the written-out recurrence does not use (its values are
    the same either way), and Dynamo breaks on it as on any use of the module."""
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and not node.value.args
            and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "flatten_parameters"
            and isinstance(node.value.func.value, ast.Attribute)
            and isinstance(node.value.func.value.value, ast.Name) and node.value.func.value.value.id == "self"
            and node.value.func.value.attr in made)


class _Unrolled(ast.NodeTransformer):
    """Each call of a recurrent attribute (``self.lstm(x, state)``) as the class's helper's."""

    def __init__(self, made: dict[str, list[ast.Assign]]) -> None:
        self.made = made
        self.used: set[str] = set()
        self.calls = 0  # calls rewritten so far

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        f = node.func
        if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self"
                and f.attr in self.made and 1 <= len(node.args) <= 2 and not node.keywords
                and not any(isinstance(a, ast.Starred) for a in node.args)):
            self.used.add(f.attr)
            self.calls += 1
            args = [*node.args] if len(node.args) == 2 else [*node.args, ast.Constant(None)]
            held = ast.Attribute(value=ast.Name("self"), attr=f"_{f.attr}_held")
            training = ast.Attribute(value=ast.Name("self"), attr="training")
            return ast.Call(func=ast.Attribute(value=ast.Name("self"), attr="_unrolled_rnn"),
                            args=[held, *args, training], keywords=[])
        return node


_SIMPLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr)


def unrolled_recurrence(stmt: ast.stmt, text: Text) -> Made | None:
    """Every call of the class's ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` attributes as the recurrence
    written out, in one patch from ``__init__`` (which makes them, and now keeps their weights
    beside them at its end) through the last call; the class gains the static method that runs it."""
    if not isinstance(stmt, _SIMPLE) or not imports_torch(text.source):
        return None  # the helper calls torch.* by that name
    tree = parsed(text.source)
    around = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
              and n.lineno <= stmt.lineno <= (n.end_lineno or n.lineno)]
    if not around:
        return None
    cls = around[-1]
    made = _made_here(cls)
    methods = [n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    fix = _Unrolled(made)
    calls: list[tuple[ast.stmt, list[str]]] = []  # each statement that calls one, as rewritten
    for m in methods:
        for n in ast.walk(m):
            if isinstance(n, ast.Expr) and _flattening(n, made):  # dropped: a block it leaves empty holds `pass`
                calls.append((n, ["pass"] if len(block_of(text.source, n)[0]) == 1 else []))
            elif isinstance(n, _SIMPLE):
                before = fix.calls
                new = fix.visit(copy.deepcopy(n))
                if fix.calls != before:
                    calls.append((n, unparsed(new).split("\n")))
    if not fix.calls or not any(s is stmt for s, _ in calls):
        return None
    first = next((m for m in methods if m.name == "__init__"), None)
    if first is None or first.decorator_list or any(not _holds(first, a) for u in fix.used for a in made[u]) or any(
            s.lineno < first.lineno or _holds(first, s) for s, _ in calls):
        return None  # made outside __init__, or called in it or before it: keep it simple
    last = max((s for s, _ in calls), key=lambda s: s.end_lineno or s.lineno)
    if "_unrolled_rnn" in text.source or any(f"_{a}_held" in text.source for a in fix.used):
        return None  # a name the rewrite would write is the file's already
    region = _region(text, first, last, calls, fix.used)
    if not region:
        return None
    note = ("each call runs the module's recurrence step by step with its own parameters, which the class now also "
            "holds beside the module, set at the end of __init__ (the same parameter objects: load_state_dict and "
            ".to() update them in place; one that replaces them, load_state_dict(assign=True), would leave the old "
            "ones held, and so would torch.nn.DataParallel's replicas); between layers a training module's dropout is drawn by torch.nn.functional.dropout (the "
            "CPU kernel's own draw; cuDNN's differs)")
    return Made([*_HELPER.rstrip("\n").split("\n"), "", *region], UNROLLED, note, first=first, last=last)


def _holds(method: ast.AST, node: ast.AST) -> bool:
    return any(n is node for n in ast.walk(method))


def _region(text: Text, first: ast.FunctionDef | ast.AsyncFunctionDef, last: ast.stmt,
            calls: list[tuple[ast.stmt, list[str]]], used: set[str]) -> list[str]:
    """The lines from ``__init__`` (``first``) through ``last`` as written (their indentation
    relative to ``first``'s), each call statement as rewritten and each module's ``_held`` line
    at the end of ``__init__``; [] where that cannot be written."""
    base = first.col_offset
    end = last.end_lineno or last.lineno
    edits: dict[int, tuple[int, list[str]]] = {}  # first line -> (last line, new lines at that indentation)
    for s, new in calls:
        indent = text_before(text.lines[s.lineno - 1], s.col_offset)
        edits[s.lineno] = (s.end_lineno or s.lineno, [indent + ln if ln else ln for ln in new])
    # At the end of __init__: the parameters as __init__ leaves them (one it replaced after making
    # the module would be held stale otherwise).
    tail = first.body[-1]
    indent = text_before(text.lines[tail.lineno - 1], tail.col_offset)
    added = []
    for attr in sorted(used):
        head = f"self._{attr}_held = "
        held = _HELD.format(attr, " " * (len(head) + 1)).split("\n")
        added += [indent + head + held[0], indent + held[1]]
    end_of_init = tail.end_lineno or tail.lineno
    if end_of_init in {s.lineno for s, _ in calls}:
        return []  # a call that ends __init__: keep it simple
    edits[end_of_init] = (end_of_init, [text.lines[end_of_init - 1], *added])
    out: list[str] = []
    line = first.lineno
    while line <= end:
        if line in edits:
            stop, new = edits[line]
            out += new
            line = stop + 1
            continue
        out.append(text.lines[line - 1])
        line += 1
    return [ln[base:] if ln[:base].strip() == "" else ln.lstrip() for ln in out]

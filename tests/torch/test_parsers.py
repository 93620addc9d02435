"""Pure parsers and classifiers, fed with text PyTorch 2.13 really produced."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dynscope._lexicon.break_categories import CATEGORY_NAMES
from dynscope._read.break_sites import category_of
from dynscope._render.causes import explained
from dynscope._torch.break_report import parse_break
from dynscope._torch.guard_text import parse_guards, parse_recompile_reasons, reason_cause

GUARDS = """
TREE_GUARD_MANAGER:
+- RootGuardManager
| +- DEFAULT_DEVICE: utils_device.CURRENT_DEVICE == None                           # _dynamo/output_graph.py:1122 in init_ambient_guards
| +- GuardManager: source=L['x'], accessed_by=FrameLocalsGuardAccessor(key='x', framelocals_idx=1), type=<class 'torch.Tensor'>, tag_safe=(False, False)
| | +- TENSOR_MATCH: check_tensor(L['x'], Tensor, DispatchKeySet(CPU, BackendSelect, ADInplaceOrView, AutogradCPU), torch.float32, device=None, requires_grad=False, size=[3, 4], stride=[4, 1])  # x = s.l(x)  # tmp/m.py:15 in forward
| | +- NO_HASATTR: hasattr(L['x'], '_dynamo_dynamic_indices') == False           # x = s.l(x)  # tmp/m.py:15 in forward
| +- GuardManager: source=G['torch'], accessed_by=DictGetItemGuardAccessor('torch'), type=<class 'module'>
| | +- ID_MATCH: ___check_obj_id(G['torch'], 140615278564976), type=<class 'module'>  # torch.sin(x)  # m.py:3 in f
"""

BREAK = """Graph break in user code at /usr/lib/python3.11/copy.py:153
Graph Break Reason: Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):

Attempted to copy.deepcopy a tensor
  Explanation: Dynamo does not support copy.deepcopy() on tensors.
  Hint: Avoid calling copy.deepcopy() on tensors.

  Developer debug context: copy.deepcopy(...)

 For more details about this graph break, please visit: https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0007.html

User code traceback:
  File "/home/u/train.py", line 40, in <module>
    out = model(x)
  File "/home/u/model.py", line 12, in forward
    shadow = copy.deepcopy(self.lin)
             ^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/lib/python3.11/copy.py", line 153, in deepcopy
    y = copier(memo)

Traceback (most recent call last):
  File "/site-packages/torch/_dynamo/symbolic_convert.py", line 1076, in wrapper
    return inner_fn(self, inst)
"""


def test_parse_guards() -> None:
    guards = parse_guards(GUARDS, "0/0")
    kinds = [g.kind for g in guards]
    assert kinds == ["DEFAULT_DEVICE", "TENSOR_MATCH", "NO_HASATTR", "ID_MATCH"]
    tensor = guards[1]
    assert tensor.source == "L['x']"
    assert tensor.detail.startswith("check_tensor(L['x'], Tensor") and tensor.detail.endswith("stride=[4, 1])")
    assert tensor.user_line == "x = s.l(x)"
    assert guards[3].source == "G['torch']"
    assert all(g.compile_id == "0/0" for g in guards)


def test_parse_break_finds_type_hints_and_stack() -> None:
    parsed = parse_break(BREAK)
    assert parsed is not None
    assert parsed.gb_type == "Attempted to copy.deepcopy a tensor"
    assert parsed.explanation == "Dynamo does not support copy.deepcopy() on tensors."
    assert parsed.hints == ("Avoid calling copy.deepcopy() on tensors.",)
    assert parsed.gb_id == "gb0007"
    assert [f.lineno for f in parsed.user_stack] == [40, 12, 153]
    assert parsed.user_stack[1].line == "shadow = copy.deepcopy(self.lin)"
    assert (parsed.reported_filename, parsed.reported_lineno) == ("/usr/lib/python3.11/copy.py", 153)


def test_parse_break_rejects_other_text() -> None:
    assert parse_break("something else") is None
    assert parse_break("") is None


def test_recompile_reasons() -> None:
    assert parse_recompile_reasons("0/0: tensor 'x' size mismatch at index 0. expected 3, actual 5") == (
        "tensor 'x' size mismatch at index 0. expected 3, actual 5",)
    assert parse_recompile_reasons('["0/1: L[\'n\'] == 2", "0/0: L[\'n\'] == 2"]') == ("L['n'] == 2",)
    assert explained(reason_cause("tensor 'x' dtype mismatch. expected Float, actual Double")) == (
        "input x changed dtype: compiled for Float, called with Double")
    assert explained(reason_cause("L['n'] == 2")) == (
        "Python value n changed: the graph was specialised to n == 2")
    said = explained(reason_cause("___stack0 <= 0.0  # if y > 0:  # mp/probe/t1.py:9 in resume (_dynamo/x.py:1 in f)"))
    assert said == "a value the code depends on changed: guard `___stack0 <= 0.0` failed (from `if y > 0:` at t1.py:9 in resume)"


@given(st.text(), st.text(), st.text())
def test_classify_always_names_a_category(gb_type: str, explanation: str, source: str) -> None:
    assert category_of(gb_type, explanation, source) in CATEGORY_NAMES


def test_classify_real_types() -> None:
    assert category_of("Data-dependent branching") == "data-dependent branch"
    assert category_of("Failed to trace builtin operator", "does not know how to trace builtin operator `print`") == \
        "logging/print side effect"
    assert category_of("Attempted to call function marked as skipped",
                    "Dynamo does not know how to trace the builtin `zlib.crc32.` (e.g. _warnings.warn)") == \
        "unsupported builtin or C/numpy call"
    assert category_of("Observed exception") == "observed exception"
    assert category_of("Something new", "", "m2 = copy.deepcopy(m)") == "deepcopy"
    assert category_of("Something new") == "other"


def test_recompile_payload_with_user_stack() -> None:
    one = '0/0: n == 0                                  #   # prog.py:3 in f\nUser stack trace:\n  File "prog.py", line 3, in f'
    assert parse_recompile_reasons(one) == ("n == 0                                  #   # prog.py:3 in f",)
    assert explained(reason_cause(parse_recompile_reasons(one)[0])) == (
        "Python value n changed: the graph was specialised to n == 0 (at prog.py:3 in f)")


def test_parse_break_other_form() -> None:
    """Another form PyTorch emits: the stack right after the first line, no header."""
    payload = (
        "Graph break: skip: from user code at:\n"
        '  File "/home/u/train.py", line 40, in <module>\n'
        "    out = model(x)\n"
        '  File "/home/u/model.py", line 12, in forward\n'
        "    for i in range(3): print(i)\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/site-packages/torch/_dynamo/convert_frame.py", line 1, in x\n'
    )
    parsed = parse_break(payload)
    assert parsed is not None
    assert (parsed.reported_filename, parsed.reported_lineno) == ("/home/u/model.py", 12)
    assert [f.lineno for f in parsed.user_stack] == [40, 12]
    assert parsed.gb_type == "Graph break: skip: from user code at"


def test_guard_origin_keeps_the_file_name_pytorch_shortened() -> None:
    # PyTorch shortens file names against its install folder, so a user file outside it
    # loses its first characters ("/tmp/review/gpt.py" -> "mp/review/gpt.py"; text as
    # torch 2.13 logged it for a nanoGPT generate): the explanation names gpt.py:12.
    reason = (
        "idx.size()[1] != 16  # att = att.masked_fill(s.bias[:,:,:T,:T]==0, float('-inf'))  "
        "# mp/review/gpt.py:12 in forward (_prims_common/__init__.py:288 in check_contiguous_sizes_strides)"
    )
    text = explained(reason_cause(reason))
    assert "at gpt.py:12 in forward" in text and "mp/review" not in text

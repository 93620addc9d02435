"""``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` calls as their recurrence written out (fix/rnns.py): the
rewrite's text on small classes, the helper it writes checked against the modules themselves
(outputs, states and gradients, every setting it reads), and the live programs of
tests/corpus/fix_recurrent.py; and the verifier's part: statements a patch appends to
``__init__`` run on the copies fix makes of a model whose ``__init__`` ran before."""

from __future__ import annotations

import ast
import importlib.util
import textwrap
from typing import TYPE_CHECKING, Any

import pytest
import torch
from torch import nn

import dynscope
from dynscope._capture.fix import rnns
from dynscope._capture.fix.rewrites import candidates
from dynscope._capture.fix.verify import _appended_to_init, _init_ran_again
from dynscope._lexicon.break_categories import OTHER
from tests.corpus import fix_recurrent as fr

if TYPE_CHECKING:
    import types
    from pathlib import Path

TAGGER = """\
import torch
from torch import nn


class Tagger(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.encoder = nn.LSTM(dim, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 3)

    def forward(self, x):
        out, (h, c) = self.encoder(x)  # the encoder
        return self.head(out)
"""


def _made(source: str, line: int) -> dict[str, str]:
    found, _ = candidates(source, line, OTHER)
    return {rw.name: "".join(rw.replacement) for rw in found}


def test_a_recurrent_call_is_the_class_s_static_method_over_what_init_now_keeps() -> None:
    made = _made(TAGGER, 12)[rnns.UNROLLED]
    assert made.startswith("    @staticmethod\n    def _unrolled_rnn(held, x, state=None, training=False):\n")
    assert ("        self.head = nn.Linear(hidden, 3)\n"
            "        self._encoder_held = (self.encoder.mode, self.encoder.all_weights, self.encoder.num_layers, "
            "self.encoder.bidirectional,\n") in made
    assert made.endswith(
        "    def forward(self, x):\n"
        "        out, (h, c) = self._unrolled_rnn(self._encoder_held, x, None, self.training)\n")
    assert "self.encoder = nn.LSTM(dim, hidden, batch_first=True)\n" in made  # the module itself stays
    compile(TAGGER.replace("".join(TAGGER.splitlines(keepends=True)[5:12]), made), "tagger.py", "exec")


@pytest.mark.parametrize(("old", "new"), [
    ("        self.encoder = nn.LSTM(dim, hidden, batch_first=True)\n",  # made outside __init__
     "        self.build(dim, hidden)\n\n    def build(self, dim, hidden):\n"
     "        self.encoder = nn.LSTM(dim, hidden, batch_first=True)\n"),
    ("        self.head = nn.Linear(hidden, 3)\n",  # bound to another module too
     "        self.head = nn.Linear(hidden, 3)\n        self.encoder = nn.Identity()\n"),
    ("import torch\n", ""),  # the helper calls torch.* by that name
    ("self.encoder(x)", "self.encoder(x, hx=None)"),  # a keyword the helper does not take
])
def test_no_rewrite_where_the_module_or_its_call_is_not_the_plain_shape(old: str, new: str) -> None:
    source = TAGGER.replace(old, new)
    line = next(i for i, ln in enumerate(source.splitlines(), 1) if "self.encoder(x" in ln)
    assert rnns.UNROLLED not in _made(source, line), new


PICKED = """\
import torch
from torch import nn


class Question(nn.Module):
    def __init__(self, dim, hidden, rnn_type):
        super().__init__()
        rnn_cls = nn.LSTM if rnn_type == "LSTM" else nn.GRU
        self.rnn = rnn_cls(dim, hidden, batch_first=True)

    def forward(self, x):
        if self.training:
            self.rnn.flatten_parameters()
        self.rnn.flatten_parameters()
        return self.rnn(x)[0]
"""


def test_a_class_a_setting_picks_and_its_flatten_parameters_calls_dropped() -> None:
    # bottom-up-attention-vqa's question embedding: the site is the flatten_parameters call
    # (Dynamo breaks on any use of the module); a block it leaves empty holds `pass`.
    made = _made(PICKED, 13)[rnns.UNROLLED]
    assert made.endswith(
        "    def forward(self, x):\n"
        "        if self.training:\n"
        "            pass\n"
        "        return self._unrolled_rnn(self._rnn_held, x, None, self.training)[0]\n")
    assert "flatten_parameters" not in made
    # A class picked from anything but recurrent ones: no rewrite.
    assert rnns.UNROLLED not in _made(PICKED.replace("else nn.GRU", "else nn.Linear"), 13)


def _helper() -> Any:
    ns: dict[str, Any] = {"torch": torch}
    exec(textwrap.dedent(rnns._HELPER.replace("@staticmethod\n", "")), ns)  # the helper fix writes, run here on its own
    return ns["_unrolled_rnn"]


def _held(m: nn.RNNBase) -> tuple[Any, ...]:
    return (m.mode, m.all_weights, m.num_layers, m.bidirectional, m.batch_first, m.proj_size, m.dropout, m.bias)


def _error(a: Any, b: Any) -> float:
    if isinstance(a, tuple):
        return max(_error(x, y) for x, y in zip(a, b, strict=True))
    return float((a - b).abs().max())


_SETTINGS = [{}, {"num_layers": 2, "bidirectional": True}, {"batch_first": True}, {"bias": False}]


@pytest.mark.parametrize(("kind", "settings"), [
    *((kind, settings) for kind in (nn.LSTM, nn.GRU, nn.RNN) for settings in _SETTINGS),
    (nn.LSTM, {"proj_size": 3}), (nn.RNN, {"nonlinearity": "relu"})])
def test_the_written_recurrence_equals_the_module(kind: Any, settings: dict[str, Any]) -> None:
    torch.manual_seed(0)
    m, run = kind(5, 7, **settings), _helper()
    x = torch.randn(4, 2, 5)
    assert _error(m(x), run(_held(m), x)) < 1e-5  # no state given: zeros
    assert _error(m(x[:, 0]), run(_held(m), x[:, 0])) < 1e-5  # unbatched
    state = m(x)[1]
    state = tuple(torch.randn_like(t) for t in state) if isinstance(state, tuple) else torch.randn_like(state)
    assert _error(m(x, state), run(_held(m), x, state)) < 1e-5
    m(x, state)[0].sum().backward()
    want = [p.grad.clone() for p in m.parameters() if p.grad is not None]
    m.zero_grad()
    run(_held(m), x, state)[0].sum().backward()
    assert max(_error(w, p.grad) for w, p in zip(want, m.parameters(), strict=True)) < 1e-5


def test_the_written_recurrence_compiles_as_one_graph() -> None:
    torch.manual_seed(0)
    m = nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    compiled = torch.compile(_helper(), backend="eager", fullgraph=True)  # raises on any break
    assert _error(m(torch.ones(2, 1, 3)), compiled(_held(m), torch.ones(2, 1, 3))) < 1e-5


INIT = """\
class Tagger:
    def __init__(self, n):
        self.n = n
        self.items = [n]
"""


def _loaded(path: Path, text: str) -> types.ModuleType:
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_only_self_assignments_appended_to_init_are_run_again_on_a_copy(tmp_path: Path) -> None:
    old = _loaded(tmp_path / "tagger_old.py", INIT).Tagger
    patched = _loaded(tmp_path / "tagger_new.py", INIT + "        self.total = sum(self.items) * 2\n")
    added = _appended_to_init(old, patched.Tagger)
    assert [ast.unparse(s) for s in added] == ["self.total = sum(self.items) * 2"]
    part = old(3)
    part.items.append(4)  # state after __init__: what the appended statement reads now
    part.__class__ = patched.Tagger
    assert _init_ran_again(part, old, patched.Tagger, patched) == "" and part.total == 14
    # Raising on the copy: said, naming the class.
    broken = _loaded(tmp_path / "tagger_broken.py", INIT + "        self.total = self.missing\n")
    fresh = old(3)
    fresh.__class__ = broken.Tagger
    assert "Tagger.__init__ raised" in _init_ran_again(fresh, old, broken.Tagger, broken)
    # What the patch changed inside __init__, or appended that is no self-assignment, is not run.
    for k, body in enumerate((INIT.replace("self.n = n", "self.n = n + 1") + "        self.total = 0\n",
                              INIT + "        print(self.n)\n")):
        other = _loaded(tmp_path / f"tagger_other{k}.py", body)
        assert _appended_to_init(old, other.Tagger) == ()


@pytest.mark.heavy
@pytest.mark.parametrize("name", ["seq2seq_tagger", "holistic_encoder", "trajectory_decoder", "dropped_layers"])
def test_recurrent_calls_unrolled_are_verified_live(name: str) -> None:
    model, inputs = fr.PROGRAMS[name]()
    res = dynscope.fix(model, inputs)
    (p,) = res.patches
    assert p.rewrite == rnns.UNROLLED and p.verified and p.breaks_after == 0 and p.gradients_matched, p.why_not
    assert res.breaks_after == 0 and res.outputs_matched_after
    assert "holds beside the module" in p.assumes and "_unrolled_rnn" in p.diff
    # fix ran copies: the user's model neither holds the weights beside its module nor runs the helper
    assert not any(k.endswith("_held") for m in model.modules() for k in vars(m))


@pytest.mark.heavy
def test_a_site_the_patch_carries_over_as_it_was_keeps_its_own_reason() -> None:
    # init_hidden sits between __init__ and forward, inside the patch's lines, and breaks on
    # Tensor.new, which no rewrite takes: its break is its own (the patch is verified without
    # it), and it is said as a site left alone, not as part of the patch.
    model, inputs = fr.PROGRAMS["question_encoder"]()
    res = dynscope.fix(model, inputs)
    (p,) = res.patches
    assert p.rewrite == rnns.UNROLLED and p.verified and p.breaks_after == 0, p.why_not
    (u,) = res.unpatched
    assert u.site.endswith(f":{p.lineno - 5}") and not u.gone_with and u.why.startswith("no patch:"), u
    assert res.breaks_after == p.program_breaks_after > 0


@pytest.mark.heavy
def test_a_patch_whose_lines_hold_one_verified_before_it_takes_its_place() -> None:
    # float(x.std()) is patched first (PyTorch logs it first); the recurrence's patch spans its
    # line and rewrites it too (followed on): the two cannot be written together, and the one
    # that removes both breaks is written, the other's site part of it.
    model, inputs = fr.scaled_encoder()
    res = dynscope.fix(model, inputs)
    (p,) = res.patches
    assert p.rewrite.startswith(rnns.UNROLLED) and p.verified and p.program_breaks_after == 0, p
    (u,) = res.unpatched
    assert u.gone_with == (p.site,) and "part of the verified patch" in u.why
    assert res.breaks_after == 0 and res.outputs_matched_after


@pytest.mark.heavy
def test_a_packed_sequence_is_no_tensor_and_its_patch_is_not_verified() -> None:
    model, inputs = fr.PROGRAMS["packed_encoder"]()
    res = dynscope.fix(model, inputs)
    (p,) = res.patches
    assert not p.verified and "PackedSequence" in p.why_not and "holds beside the module" in p.why_not

"""An independent measurement of memory, to check ``report(memory=True)`` against.

dynscope sums the CPU allocator's raw allocation events (:mod:`dynscope._torch.memory`).
This module reads instead the profiler's own *memory timeline*
(``torch.profiler._memory_profiler.MemoryProfileTimeline``, what
``prof.export_memory_timeline`` draws): the memory profiler ties each allocation to a tensor
(a ``TensorKey``), follows it through the ops' data flow, and lists, in time order, each
tensor's creation, version bumps and destruction with its size; tensors that existed before
the profile are listed first, at time -1, as pre-existing. The bytes live at a moment are the
running total of that list; the peak above the start is its maximum less the pre-existing
total. Both read the same allocator's events, so on the same graph they may agree to the
byte; what differs is the bookkeeping (per tensor and data flow here, a plain sum there) and
every build and run (made here, apart from dynscope's).

The totals are summed here at the timeline's own nanosecond resolution, not through
``_coalesce_timeline``: that helper rounds times to microseconds and merges everything in one
microsecond into one step, so a temporary freed in the same microsecond as the next
allocation is made would drop out of the peak (:func:`coalesced_peak` gives its figure too).

Also here, shared by ``tests/capture/test_memory.py`` and ``benchmarks/memory_table.py``:

- the programs measured: a nanoGPT-like training step (AdamW) and a small conv net (SGD);
- a recording ``torch.compile`` backend that builds each graph Dynamo captured with
  ``compile_fx`` (what the default "inductor" backend calls) and keeps the graph, its live
  example inputs, its grad mode and the build (a real Dynamo run, its own compile);
- one graph's forward and forward+backward peaks measured on the timeline, by the procedure
  ``report(memory=True)`` documents (gradients for the graph's inputs with
  ``torch.autograd.grad``, ones as cotangents, after one warm step).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

CPU = torch.device("cpu")


@dataclass(frozen=True)
class TimelinePeak:
    """One run's memory read from the profiler's memory timeline, CPU only."""

    peak: int  # bytes: the highest total during the run, less what existed before it
    start: int  # bytes of the pre-existing tensors the run touched (inputs, parameters)
    end: int  # bytes still held at the end above the start (negative: the run freed some)
    events: int  # timeline entries on the CPU (creations, version bumps, destructions)


def _profiled(run: Callable[[], Any]) -> Any:
    """The memory profile of one call of ``run``, its result dropped inside the profile (an
    output counts at the peak while it lives, as in the program)."""
    from torch.profiler import ProfilerActivity, profile

    # record_shapes and with_stack: the memory profiler requires both.
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        out = run()
        del out
    return prof


def _timeline(prof: Any) -> Any:
    from torch.profiler._memory_profiler import MemoryProfileTimeline

    return MemoryProfileTimeline(prof._memory_profile())


def _cpu_entries(timeline: Any) -> Iterator[tuple[int, Any, int]]:
    for t, action, (key, _version), numbytes in timeline.timeline:
        if key.device == CPU:
            yield t, action, int(numbytes)


def peak_of_timeline(timeline: Any) -> TimelinePeak:
    """The peak above the start of a ``MemoryProfileTimeline``'s CPU entries."""
    from torch.profiler._memory_profiler import Action

    start = now = peak = 0
    events = 0
    for _t, action, numbytes in _cpu_entries(timeline):
        events += 1
        if action == Action.PREEXISTING:
            start += numbytes
            now += numbytes
        elif action == Action.CREATE:
            now += numbytes
        elif action == Action.DESTROY:
            now -= numbytes
        # INCREMENT_VERSION moves a tensor's bytes from one version to the next: no change.
        peak = max(peak, now)
    return TimelinePeak(peak=max(peak - start, 0), start=start, end=now - start, events=events)


def timeline_peak(run: Callable[[], Any]) -> TimelinePeak:
    """The CPU peak of one call of ``run`` above what existed before it, from the
    profiler's memory timeline."""
    return peak_of_timeline(_timeline(_profiled(run)))


def coalesced_peak(run: Callable[[], Any]) -> int:
    """The same peak from ``_coalesce_timeline`` (totals per microsecond): its highest total
    less the pre-existing bytes (its first step, at the earliest time, holds those)."""
    from torch.profiler._memory_profiler import Action

    timeline = _timeline(_profiled(run))
    start = sum(n for _t, action, n in _cpu_entries(timeline) if action == Action.PREEXISTING)
    _times, sizes = timeline._coalesce_timeline(CPU)
    totals = [sum(row) for row in sizes]
    return max(max(totals, default=0) - start, 0)


# --- one graph, measured as report(memory=True) says it measures ---------------------------


def detached(values: Sequence[Any]) -> list[Any]:
    """Recorded inputs cut from the history they were made in (a resume graph's inputs are
    the previous graph's outputs); leaves kept as they are."""
    return [
        v.detach().requires_grad_(v.requires_grad) if isinstance(v, torch.Tensor) and not v.is_leaf else v
        for v in values
    ]


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def forward_peak(fn: Callable[..., Any], inputs: Sequence[Any], *, grad: bool) -> TimelinePeak:
    """One forward call's timeline peak, in grad mode ``grad``."""
    with torch.set_grad_enabled(grad):
        return timeline_peak(lambda: fn(*inputs))


def train_peak(fn: Callable[..., Any], inputs: Sequence[Any]) -> TimelinePeak:
    """One forward+backward step's timeline peak: gradients of the outputs that need grad
    (ones as cotangents) for the inputs that require grad, with ``torch.autograd.grad`` (no
    ``.grad`` changes), after one warm step (a compiled backward compiles at its first run)."""
    wrt = [v for v in inputs if isinstance(v, torch.Tensor) and v.requires_grad]
    with torch.enable_grad():
        cots = [torch.ones_like(t) for t in _tensors(fn(*inputs)) if t.requires_grad]

        def step() -> Any:
            outs = [t for t in _tensors(fn(*inputs)) if t.requires_grad]
            return torch.autograd.grad(outs, wrt, cots, allow_unused=True)

        step()
        return timeline_peak(step)


def saved_input_copies(fn: Callable[..., Any], inputs: Sequence[Any], which: Sequence[int]) -> int:
    """Bytes of the new storages one forward of ``fn`` saves for the backward that hold a
    copy of an input (same shape and values, another storage: Inductor's CPU layout
    optimization saves channels-last copies of a conv's input and weights), among the inputs
    at positions ``which``; each storage counted once."""
    own = {v.untyped_storage().data_ptr() for v in inputs if isinstance(v, torch.Tensor)}
    candidates = [inputs[i] for i in which if isinstance(inputs[i], torch.Tensor)]
    copies: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in own and any(
            t.shape == v.shape and t.dtype == v.dtype and torch.equal(t, v.detach()) for v in candidates
        ):
            copies[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*inputs)
    del out
    return sum(copies.values())


# --- graphs recorded from a real Dynamo run -------------------------------------------------


@dataclass
class Recorded:
    """One graph Dynamo handed to the backend: the GraphModule (a copy, kept before Inductor
    saw it: its passes may rewrite the module they are given), its live example inputs, the
    grad mode it was captured in, and Inductor's build of it."""

    gm: torch.fx.GraphModule
    inputs: list[Any]
    grad: bool
    compiled: Callable[..., Any]

    @property
    def trains(self) -> bool:
        """A training graph: captured under grad, and one of its outputs needs grad (run
        once here to see), so AOTAutograd builds it a backward."""
        if not self.grad:
            return False
        with torch.enable_grad():
            return any(t.requires_grad for t in _tensors(self.gm(*detached(self.inputs))))

    @property
    def op_count(self) -> int:
        """Nodes that call something (placeholders, attributes and the output apart)."""
        return sum(1 for n in self.gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))


@dataclass
class InductorRecorder:
    """A ``torch.compile`` backend that builds each graph with Inductor exactly as the
    default backend does (``compile_fx(gm, example_inputs)``: the "inductor" backend is that
    call) and keeps the graph, its inputs and the build."""

    graphs: list[Recorded] = field(default_factory=list)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        from torch._inductor.compile_fx import compile_fx

        eager = copy.deepcopy(gm)
        compiled: Callable[..., Any] = compile_fx(gm, example_inputs)  # type: ignore[assignment]
        self.graphs.append(Recorded(eager, list(example_inputs), torch.is_grad_enabled(), compiled))
        return compiled


def compile_recorded(fn: Callable[..., Any], args: Sequence[Any]) -> tuple[Callable[..., Any], list[Recorded]]:
    """``fn`` compiled with Inductor from a fresh Dynamo state (``torch._dynamo.reset()``:
    the test's own, it clears every compile cache in the process), called once (every graph
    built), and the graphs with their builds in compile order."""
    torch._dynamo.reset()
    rec = InductorRecorder()
    compiled = torch.compile(fn, backend=rec)
    compiled(*args)
    # A copy: a later call that recompiles (an optimizer whose state now exists) adds graphs.
    return compiled, list(rec.graphs)


# --- the programs ---------------------------------------------------------------------------


class _Attention(nn.Module):
    """Causal self-attention, as nanoGPT writes it without flash attention."""

    def __init__(self, dim: int, heads: int, seq: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in self.qkv(x).split(c, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).contiguous().view(b, t, c))


class _Block(nn.Module):
    def __init__(self, dim: int, heads: int, seq: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = _Attention(dim, heads, seq)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    """Token and position embeddings, ``layers`` blocks, a final LayerNorm, a tied head."""

    def __init__(self, vocab: int = 128, dim: int = 64, heads: int = 4, seq: int = 32, layers: int = 2) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList([_Block(dim, heads, seq) for _ in range(layers)])
        self.lnf = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.lnf(x))


class ConvNet(nn.Module):
    """conv/bn/relu/pool twice, then a linear classifier."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.fc = nn.Linear(32 * 8 * 8, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).flatten(1))


@dataclass
class Program:
    """A training step, its arguments and its model."""

    name: str
    step: Callable[..., torch.Tensor]
    args: tuple[Any, ...]
    model: nn.Module


def gpt_program() -> Program:
    """One nanoGPT-like train step (vocab 128, 64 dims, 4 heads, seq 32, batch 8) with AdamW."""
    torch.manual_seed(0)
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    args = (torch.randint(0, 128, (8, 32)), torch.randint(0, 128, (8, 32)))
    return Program("nanoGPT", step, args, model)


def sgd_program(name: str, model: nn.Module, args: tuple[Any, ...]) -> Program:
    """One classification train step of ``model`` (cross-entropy) with SGD and momentum."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return Program(name, step, args, model)


def conv_program() -> Program:
    """One train step of :class:`ConvNet` on a batch of 16 32x32 images with SGD."""
    torch.manual_seed(0)
    return sgd_program("conv net", ConvNet(), (torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))))


@dataclass(frozen=True)
class GraphPeaks:
    """One recorded graph's timeline peaks, eager (its GraphModule) and compiled (its build)."""

    forward: tuple[int, int]  # (eager, compiled) bytes of one forward above its inputs
    train: tuple[int, int] | None  # ... of one forward+backward step; None: not a training graph


def graph_peaks(rec: Recorded) -> GraphPeaks:
    """A recorded graph measured on the timeline, eager against its Inductor build, in the
    grad mode it was captured in."""
    inputs = detached(rec.inputs)
    with torch.set_grad_enabled(rec.grad):
        rec.compiled(*inputs)  # a first call's one-off allocations are not the graph's memory
    forward = (forward_peak(rec.gm, inputs, grad=rec.grad).peak, forward_peak(rec.compiled, inputs, grad=rec.grad).peak)
    train = (train_peak(rec.gm, inputs).peak, train_peak(rec.compiled, inputs).peak) if rec.trains else None
    return GraphPeaks(forward, train)


@dataclass
class Independent:
    """A program measured here, apart from dynscope: its graphs as Dynamo captured them at the
    first call, their peaks, and one whole call eager and compiled."""

    graphs: list[Recorded]
    peaks: list[GraphPeaks]
    eager_call: TimelinePeak
    compiled_call: TimelinePeak


def measure_independently(make: Callable[[], Program]) -> Independent:
    """A fresh ``make()`` compiled with Inductor (its first call captured, as report()'s
    capture saw its own fresh copy: an optimizer's first step traces other graphs than its
    later ones), each graph measured, then one whole call eager and one compiled, each after a
    warm call. Dynamo is reset before and after (this clears every compile cache)."""
    prog = make()
    compiled, graphs = compile_recorded(prog.step, prog.args)
    try:
        peaks = [graph_peaks(r) for r in graphs]
        eager_call = whole_call(prog.step, prog.args)
        compiled_call = whole_call(compiled, prog.args)
    finally:
        torch._dynamo.reset()
    return Independent(graphs, peaks, eager_call, compiled_call)


def whole_call(fn: Callable[..., Any], args: Sequence[Any]) -> TimelinePeak:
    """One call's timeline peak after a warm call (optimizer state and first caches made)."""
    fn(*args)
    return timeline_peak(lambda: fn(*args))


def relative(got: int, expected: int) -> float:
    """|got - expected| / expected (inf when expected is 0 and got is not)."""
    if expected == 0:
        return 0.0 if got == 0 else math.inf
    return abs(got - expected) / expected

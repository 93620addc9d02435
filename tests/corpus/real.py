"""Real-shaped programs of our own writing: what users actually compile (issue 18).

Each program is built fresh by its factory (new modules, new optimizer) so that PyTorch's
own run and dynscope's see the same program. Two kinds:

- ``calls`` programs give ``(fn, calls)``: the function a user would pass to
  ``torch.compile`` and its calls (dynscope: ``report(fn, calls=calls)``);
- ``loop`` programs give ``drive(compile)``: a training loop that compiles its model itself
  with the ``compile`` it is handed (dynscope: ``capture()`` around the loop, with the
  user's own backend).

tests/capture/test_real_programs.py runs each under plain ``torch.compile`` with a counting backend
and a counting trace handler, and under dynscope, and compares the counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from collections.abc import Callable


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- a nanoGPT-like model ------------------------------------------------------------------


class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = MLP(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = 64, block_size: int = 32, d: int = 32, heads: int = 2, layers: int = 2) -> None:
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block_size, d)
        self.h = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT does

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        _, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def _batch(seed: int, batch: int = 2, t: int = 16, vocab: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    g = _gen(seed)
    return torch.randint(0, vocab, (batch, t), generator=g), torch.randint(0, vocab, (batch, t), generator=g)


def nanogpt_step_inside() -> tuple[Callable[..., Any], list[Any]]:
    """A train step with AdamW inside the compiled function (nanoGPT's loop, compiled whole)."""
    torch.manual_seed(0)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def train_step(idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss = model(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return train_step, [_batch(1), _batch(2), _batch(3)]


def nanogpt_step_outside() -> Callable[[Callable[[Any], Any]], None]:
    """nanoGPT's own recipe: the model compiled, backward and AdamW outside it."""

    def drive(compile: Callable[[Any], Any]) -> None:
        torch.manual_seed(0)
        model = GPT()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        compiled = compile(model)
        for seed in (1, 2, 3):
            loss = compiled(*_batch(seed))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    return drive


# -- a KV-cache decoder (gpt-fast's shape) ---------------------------------------------------


class KVCache(nn.Module):
    def __init__(self, batch: int, heads: int, max_seq: int, head_dim: int) -> None:
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(batch, heads, max_seq, head_dim))
        self.register_buffer("v_cache", torch.zeros(batch, heads, max_seq, head_dim))

    def update(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k_out, v_out = self.k_cache, self.v_cache
        k_out[:, :, input_pos] = k
        v_out[:, :, input_pos] = v
        return k_out, v_out


class DecoderAttention(nn.Module):
    def __init__(self, d: int, heads: int, max_seq: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.wqkv = nn.Linear(d, 3 * d, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.kv_cache = KVCache(1, heads, max_seq, d // heads)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        bsz, seqlen, d = x.shape
        q, k, v = self.wqkv(x).split(d, dim=-1)
        q, k, v = (t.view(bsz, seqlen, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        k, v = self.kv_cache.update(input_pos, k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.wo(y.transpose(1, 2).contiguous().view(bsz, seqlen, d))


class Decoder(nn.Module):
    def __init__(self, vocab: int = 64, d: int = 32, heads: int = 2, layers: int = 2, max_seq: int = 32) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([DecoderAttention(d, heads, max_seq) for _ in range(layers)])
        self.norm = nn.LayerNorm(d)
        self.out = nn.Linear(d, vocab, bias=False)
        self.register_buffer("causal_mask", torch.tril(torch.ones(max_seq, max_seq, dtype=torch.bool)))

    def forward(self, idx: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        mask = self.causal_mask[None, None, input_pos]
        x = self.tok(idx)
        for layer in self.layers:
            x = x + layer(x, mask, input_pos)
        return self.out(self.norm(x))


def kv_decode() -> tuple[Callable[..., Any], list[Any]]:
    """Prefill 8 tokens, then decode one token at a time at moving positions (no_grad)."""
    torch.manual_seed(0)
    model = Decoder().eval()

    @torch.no_grad()
    def decode_step(idx: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        logits = model(idx, input_pos)
        return logits[:, -1].argmax(-1, keepdim=True)

    g = _gen(4)
    prompt = torch.randint(0, 64, (1, 8), generator=g)
    calls: list[Any] = [(prompt, torch.arange(8))]
    for pos in (8, 9, 10):
        calls.append((torch.randint(0, 64, (1, 1), generator=g), torch.tensor([pos])))
    return decode_step, calls


# -- a Hugging Face model's train step --------------------------------------------------------


def hf_gpt2_step() -> tuple[Callable[..., Any], list[Any]]:
    """A tiny GPT-2 from a config (no download), trained one step per call inside the compiled function."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def hf_train_step(input_ids: torch.Tensor) -> torch.Tensor:
        out = model(input_ids=input_ids, labels=input_ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        return out.loss.detach()

    g = _gen(5)
    return hf_train_step, [torch.randint(0, 64, (2, 16), generator=g) for _ in range(2)]


# -- a DDP step -------------------------------------------------------------------------------


def ddp_step() -> Callable[[Callable[[Any], Any]], None]:
    """DDP on one gloo rank around the user's compiled module (DDP's optimizer splits at buckets)."""

    def drive(compile: Callable[[Any], Any]) -> None:
        from torch.nn.parallel import DistributedDataParallel as DDP

        torch.manual_seed(0)
        model = nn.Sequential(*[nn.Sequential(nn.Linear(512, 512), nn.ReLU()) for _ in range(4)], nn.Linear(512, 1))
        # 1 MB buckets (a layer each; DDP's first bucket is 1 MB too), so DDP's optimizer
        # has boundaries to split the graph at.
        # The module DDP wraps is compiled (PyTorch's recipe): DDP's optimizer then splits
        # its graph at the bucket boundaries.
        compiled = DDP(compile(model), bucket_cap_mb=1)
        opt = torch.optim.SGD(compiled.parameters(), lr=0.1)
        g = _gen(6)
        for _ in range(2):
            loss = compiled(torch.randn(8, 512, generator=g)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()

    return drive


# -- nested frames (the shapes of PyTorch's NestedGraphBreakLoggingTests) -------------------


class Section:
    """A user context manager (Dynamo traces its __enter__/__exit__)."""

    def __enter__(self) -> Section:
        return self

    def __exit__(self, *exc: object) -> bool:
        return False


def _in_sections(x: torch.Tensor) -> torch.Tensor:
    with Section():
        with Section():
            x = x + 1
            print("inside two sections")
            return x * 2


def nested_sections() -> tuple[Callable[..., Any], list[Any]]:
    """A break inside two nested user context managers, in a helper."""

    def sections_fn(x: torch.Tensor) -> torch.Tensor:
        return _in_sections(x.sin()).cos()

    return sections_fn, [torch.randn(4, generator=_gen(7))]


def _try_inner(x: torch.Tensor) -> torch.Tensor:
    try:
        print("under a try block")
        return x + 1
    except ValueError:
        return x


def _try_middle(x: torch.Tensor) -> torch.Tensor:
    return _try_inner(x * 2)


def try_three_deep() -> tuple[Callable[..., Any], list[Any]]:
    """A break under a try block, three frames deep."""

    def try_fn(x: torch.Tensor) -> torch.Tensor:
        return _try_middle(x.sin()).cos()

    return try_fn, [torch.randn(4, generator=_gen(8))]


@dataclass(frozen=True)
class RealProgram:
    """One real-shaped program: ``make`` gives (fn, calls) for "calls" programs, ``drive`` for "loop" ones."""

    name: str
    kind: str  # "calls" (report()) or "loop" (capture() of the user's own compile)
    factory: Callable[[], Any]
    needs: str = ""  # "distributed": a process group must be up (tests start one)


REAL_PROGRAMS: tuple[RealProgram, ...] = (
    RealProgram("nanogpt_adamw_inside", "calls", nanogpt_step_inside),
    RealProgram("nanogpt_adamw_outside", "loop", nanogpt_step_outside),
    RealProgram("kv_cache_decode", "calls", kv_decode),
    RealProgram("hf_gpt2_train_step", "calls", hf_gpt2_step),
    RealProgram("ddp_step", "loop", ddp_step, needs="distributed"),
    RealProgram("nested_sections", "calls", nested_sections),
    RealProgram("try_three_deep", "calls", try_three_deep),
)

__all__ = ["REAL_PROGRAMS", "RealProgram"]

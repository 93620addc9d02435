"""Programs that set up state in forward, take gradients inside it, exit loops early and log
their losses, in the shapes real repositories write them, for ``dynscope.fix``.

As in tests/corpus/fix_programs.py: each program is a (model, inputs) builder; each break
site carries ``# SITE: <rewrite>`` (the rewrite expected to remove it), ``# SITE: none``
(no patch may be verified) or ``# SITE: on purpose`` (torch.optim's own breaks). Imports only
torch, numpy, tqdm and the standard library: ``fix`` imports patched copies of it.
"""

from __future__ import annotations

import copy
import enum
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from tqdm import tqdm


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# -- a teacher copied in forward -----------------------------------------------------------------


class SelfDistill(nn.Module):
    """Self-distillation: a frozen copy of the student made each step, its soft labels the target."""

    def __init__(self, dim: int = 8, classes: int = 4) -> None:
        super().__init__()
        self.student = nn.Sequential(nn.Linear(dim, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        teacher = copy.deepcopy(self.student)  # SITE: call with detached state instead of deepcopy
        with torch.no_grad():
            soft = teacher(x * 0.9).softmax(-1)
        logits = self.student(x)
        return F.kl_div(logits.log_softmax(-1), soft, reduction="batchmean")


def distill() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return SelfDistill(), _x(6, 8)


class EMATeacher(nn.Module):
    """An EMA teacher made on the first call and kept on self: a copy that lives on, no call."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.encoder = nn.Linear(dim, dim)
        self.ema: nn.Module | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ema is None:
            self.ema = copy.deepcopy(self.encoder)  # SITE: none
        return (self.encoder(x) - self.ema(x).detach()).square().mean()


def ema_teacher() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return EMATeacher(), _x(4, 8)


# -- gradients inside forward ----------------------------------------------------------------------


class SaliencyGate(nn.Module):
    """Input saliency gates the input for a second pass (as attribution-guided training does)."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, 16), nn.Tanh(), nn.Linear(16, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.detach().requires_grad_(True)  # SITE: torch.func instead of autograd.grad
        score = self.net(x).max(-1).values.sum()
        grad, = torch.autograd.grad(score, x)  # SITE: torch.func instead of autograd.grad
        gate = grad.abs() / (grad.abs().amax(-1, keepdim=True) + 1e-6)
        return self.net(x.detach() * gate)


def saliency() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return SaliencyGate(), _x(4, 8)


def guided(denoiser: nn.Module, classifier: nn.Module, scale: float) -> Any:
    """A guidance wrapper as samplers build one (in our words): the denoiser's output moved along
    the classifier's gradient, taken in a function made inside the wrapper and returned as it is."""

    def class_grad(x: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            x_in = x.detach().requires_grad_(True)  # SITE: torch.func instead of autograd.grad
            score = classifier(x_in).logsumexp(-1)
            return torch.autograd.grad(score.sum(), x_in)[0]  # SITE: torch.func instead of autograd.grad

    def guided_fn(x: torch.Tensor) -> torch.Tensor:
        return denoiser(x) - scale * class_grad(x)

    return guided_fn


class Sampler:
    """A sampler object holding the guided function in a lambda of its own, as solver classes do."""

    def __init__(self, fn: Any) -> None:
        self.model = lambda x: fn(x)

    def step(self, x: torch.Tensor) -> torch.Tensor:
        return x - 0.1 * self.model(x)


class GuidedSampler(nn.Module):
    """Two guided steps; the gradient function is reached through the sampler's lambda and the
    wrapper's closure: fix runs the patched file's copies of all three."""

    def __init__(self, dim: int = 6) -> None:
        super().__init__()
        self.denoiser = nn.Linear(dim, dim)
        self.classifier = nn.Sequential(nn.Linear(dim, 8), nn.Tanh(), nn.Linear(8, 3))
        self.sampler = Sampler(guided(self.denoiser, self.classifier, 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(2):
            x = self.sampler.step(x)
        return x


def guided_sampler() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(11)
    return GuidedSampler(), _x(3, 6)


class WGANCritic(nn.Module):
    """The WGAN-GP critic loss: a gradient penalty on interpolates, differentiated again."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.critic = nn.Sequential(nn.Linear(dim, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, real: torch.Tensor, fake: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        interp = (alpha * real + (1 - alpha) * fake).requires_grad_(True)  # SITE: torch.func instead of autograd.grad
        d = self.critic(interp)
        grads = torch.autograd.grad(outputs=d, inputs=interp, grad_outputs=torch.ones_like(d), create_graph=True,  # SITE: torch.func instead of autograd.grad
                                    retain_graph=True, only_inputs=True)[0]
        penalty = ((grads.norm(2, dim=1) - 1) ** 2).mean()
        return self.critic(fake).mean() - self.critic(real).mean() + 10 * penalty


def gradient_penalty() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return WGANCritic(), (_x(4, 8), _x(4, 8, seed=1), torch.rand(4, 1, generator=torch.Generator().manual_seed(2)))


def input_saliency(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The caller's own x is made to require grad, and the output uses it: its gradient is the
    caller's to read, so a rewrite that leaves x alone changes what the caller gets."""
    x.requires_grad_(True)  # SITE: none
    out = net(x).sum()
    g, = torch.autograd.grad(out, x)  # SITE: none
    return (x * g.sign()).sum()


def saliency_leak() -> tuple[Any, tuple[Any, ...]]:
    torch.manual_seed(0)
    return input_saliency, (nn.Linear(8, 2), _x(4, 8))


# -- state set up in forward ---------------------------------------------------------------------


class LazyHead(nn.Module):
    """A head built on the first call, sized by the input (a lazy init written by hand)."""

    def __init__(self) -> None:
        super().__init__()
        self.head: nn.Module | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.head is None:
            self.head = nn.Linear(x.shape[-1], 3)  # SITE: none
        return self.head(x)


def lazy_head() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return LazyHead(), _x(4, 8)


# -- generators and loops that exit early ----------------------------------------------------------


def episode_return(rewards: torch.Tensor, dones: torch.Tensor, gamma: float = 0.9) -> torch.Tensor:
    """An RL episode's discounted return up to its first terminal step."""
    end = next(t for t, d in enumerate(dones) if d > 0.5)  # SITE: generator to tensor ops
    steps = torch.arange(rewards.shape[0])
    alive = steps <= end
    return (rewards * gamma ** steps * alive).sum()


def episode() -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    return episode_return, (_x(8), torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0]))


def clip_outliers(scores: torch.Tensor) -> torch.Tensor:
    """Scores halved when any is an outlier, as a sanity check written with Python's any()."""
    if any(s.abs() > 2 for s in scores):  # SITE: generator to tensor ops
        scores = scores / 2
    return scores.softmax(-1)


def outliers() -> tuple[Any, torch.Tensor]:
    return clip_outliers, _x(8) * 2


def prompt_mean(tokens: torch.Tensor, sep: torch.Tensor) -> torch.Tensor:
    """The prompt is the tokens before the first separator: a slice needs the index as a Python int."""
    end = next(i for i, t in enumerate(tokens) if t == sep)  # SITE: none
    return tokens[:end].float().mean()


def prompt() -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    return prompt_mean, (torch.tensor([5, 3, 7, 0, 2, 0]), torch.tensor(0))


def nucleus_cutoff(logits: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Top-p filtering with the cut-off found by a scan that stops at the first index past p."""
    probs, order = logits.softmax(-1).sort(descending=True)
    cum = probs.cumsum(-1)
    cutoff = cum.shape[0] - 1
    for i in range(cum.shape[0]):
        if cum[i] > p:  # SITE: loop exit to argmax
            cutoff = i
            break
    keep = torch.arange(cum.shape[0]) <= cutoff
    return torch.zeros_like(probs).scatter(0, order, probs * keep)


def nucleus() -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    return nucleus_cutoff, (_x(10), torch.tensor(0.8))


# -- decoding and rollouts with an early stop --------------------------------------------------------


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 12, dim: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab)

    def step(self, tok: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(tok).tanh()).argmax(-1)


class BufferedGreedy(TinyLM):
    """Greedy decoding into a buffer of max_new_tokens pads, stopped when every row hit eos."""

    def forward(self, tok: torch.Tensor, eos: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(tok.shape[0], 6, dtype=torch.long)
        for i in range(6):
            tok = self.step(tok)
            out[:, i] = tok
            if (tok == eos).all():  # SITE: early stop to a stop mask
                break
        return out


class ListGreedy(TinyLM):
    """Greedy decoding into a list stacked at the end: an early stop makes it shorter."""

    def forward(self, tok: torch.Tensor, eos: torch.Tensor) -> torch.Tensor:
        toks = [tok]
        for _ in range(6):
            tok = self.step(tok)
            toks.append(tok)
            if (tok == eos).all():  # SITE: none
                break
        return torch.stack(toks, 1)


def _decoder(cls: type[TinyLM]) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(3)
    model = cls()
    tok = torch.tensor([1, 1])
    # eos is the token both rows reach at the third step: the loop stops early on these inputs.
    with torch.no_grad():
        for _ in range(3):
            tok = model.step(tok)
    return model, (torch.tensor([1, 1]), tok[0])


def greedy_buffer() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    return _decoder(BufferedGreedy)


def greedy_list() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    return _decoder(ListGreedy)


class Rollout(nn.Module):
    """A policy rolled out in a differentiable toy environment until the episode ends."""

    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.policy = nn.Linear(dim, dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        rewards = []
        for _ in range(8):
            action = self.policy(obs).tanh()
            obs = obs * 0.5 + action
            reward = -(obs.square().sum())
            rewards.append(reward)
            done = obs.norm() > 2
            if done.item():  # SITE: early stop to a stop mask
                break
        return torch.stack(rewards).sum()


def rollout() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(1)
    return Rollout(), _x(4) * 0.5  # the episode ends at its sixth turn of eight


# -- train steps that log the loss -------------------------------------------------------------------


def nanogpt_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                 history: list[Any]) -> torch.Tensor:
    """A nanoGPT-like step: forward, loss, backward, the update, and the loss logged."""
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    loss.backward()  # SITE: none
    opt.step()  # SITE: on purpose
    opt.zero_grad(set_to_none=True)  # SITE: on purpose
    lossf = loss.item()  # SITE: keep it a tensor
    print(f"iter {len(history)}: loss {lossf:.4f}")  # SITE: guard side effect
    history.append(loss.item())  # SITE: keep the logged value a tensor
    return loss.detach()


def nanogpt() -> tuple[Any, tuple[Any, ...]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 5))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return nanogpt_step, (model, opt, _x(6, 8), torch.tensor([0, 1, 2, 3, 4, 0]), [])


class Writer:
    """A metrics writer of the program's own, used as tensorboard's and wandb's are: it keeps what
    it is given (a float here; a detached 0-dim tensor of the same value after the rewrite, which
    the patch says, as those writers take either)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, Any, int]] = []

    def add_scalar(self, tag: str, value: Any, step: int) -> None:
        self.rows.append((tag, value, step))


class AccumulatingLoss(nn.Module):
    """Gradient accumulation's loss: micro-batch losses summed as Python floats and reported."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(8, 1)
        self.writer = Writer()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        total = 0.0
        loss = x.new_zeros(())
        for xb, yb in zip(x.chunk(2), y.chunk(2), strict=True):
            micro = (self.net(xb) - yb).square().mean() / 2
            total += micro.item()  # SITE: keep the logged value a tensor
            loss = loss + micro
        self.writer.add_scalar("train/loss", total, 0)
        return loss * (1 + total)


def accumulating() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    return AccumulatingLoss(), (_x(4, 8), _x(4, 1, seed=1))


class ReportingStep(nn.Module):
    """A loss whose value is shown on a progress bar each step (tqdm's, as training loops use it;
    disabled here, so that nothing is drawn while the tests run). A bar of the program's own
    class would be compared as the program's state, and the guard refused (tests/capture/fix/
    test_fix_said.py): what an installed package's object keeps is its own bookkeeping."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(8, 1)
        self.bar = tqdm(total=1, disable=True)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = (self.net(x) - y).abs().mean()
        self.bar.set_postfix(loss=loss.item())  # SITE: guard the reported value
        return loss


def reporting() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    return ReportingStep(), (_x(4, 8), _x(4, 1, seed=1))


def mean_loss(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """An evaluation loop that returns the mean loss as a Python float: the caller wants a number,
    and a tensor in its place changes what it gets."""
    total = 0.0
    for xb, yb in zip(x.chunk(2), y.chunk(2), strict=True):
        total += F.mse_loss(net(xb), yb).item()  # SITE: none
    return total / 2


def eval_mean() -> tuple[Any, tuple[Any, ...]]:
    torch.manual_seed(0)
    return mean_loss, (nn.Linear(8, 1), _x(4, 8), _x(4, 1, seed=1))


class AverageMeter:
    """A running average, as training scripts keep their losses (in our words)."""

    def __init__(self) -> None:
        self.val: Any = 0
        self.sum: Any = 0
        self.count = 0
        self.avg: Any = 0

    def update(self, val: Any, n: int = 1) -> None:
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


class MeteredStep(nn.Module):
    """A validation step that feeds its loss to a meter with ``.item()``: kept a tensor, the
    meter's numbers are detached 0-dim tensors of the same values (said in the patch)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 3)
        self.loss_meter = AverageMeter()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(self.net(x), y)
        self.loss_meter.update(loss.item(), x.size(0))  # SITE: keep it a tensor
        return loss


def metered_step() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(931)
    return MeteredStep(), (torch.randn(6, 4), torch.randint(0, 3, (6,)))


class TrustSGD(torch.optim.Optimizer):
    """An optimizer of the user's own with a layer-wise trust ratio (in our words, as LAMB's
    reference code writes its fallback): torch.optim wraps its ``step`` in a profiling hook
    when the first instance is made, so the class the model holds no longer has the ``def``
    the file has; fix reads the wrapped method as its ``def``."""

    def __init__(self, params: Any, lr: float = 0.1) -> None:
        super().__init__(params, {"lr": lr})

    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                w, g = p.detach().norm(), p.grad.norm()
                if w == 0 or g == 0:  # SITE: branch to torch.where
                    trust = torch.ones_like(w)
                else:
                    trust = w / g
                p.data.sub_(group["lr"] * trust * p.grad)


class TrustStep(nn.Module):
    """A train step that holds its model and the user's optimizer: backward, then its step."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 2)
        self.opt = TrustSGD(self.net.parameters())

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = F.mse_loss(self.net(x), y)
        loss.backward()  # SITE: none
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)  # SITE: on purpose
        return loss.detach()


def trusted() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(937)
    return TrustStep(), (_x(5, 4), _x(5, 2, seed=1))


class LengthBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        h = self.lin(x)
        if lengths is not None:
            h = h * (torch.arange(x.shape[1]) < lengths[:, None]).unsqueeze(-1)
        return h


class MixedBlocks(nn.Module):
    """An encoder over blocks of two kinds (in our words, as speaker-embedding models write it):
    each block tried with the lengths, and called without them where its forward refuses them."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([LengthBlock(), nn.Linear(4, 4), LengthBlock()])

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        for layer in self.blocks:
            try:
                x = layer(x, lengths=lengths)  # SITE: call chosen by the callee's signature
            except TypeError:
                x = layer(x)
        return x.sum(1)


def mixed_blocks() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(943)
    return MixedBlocks(), (torch.randn(2, 5, 4), torch.tensor([5, 3]))


class Reduction(enum.Enum):
    MEAN = enum.auto()
    SUM = enum.auto()


class EnumSetting(nn.Module):
    """A loss whose reduction is an enum of the file's own (in our words, as diffusion code keeps
    its loss and variance types): a patched copy of the file compares the model's member with its
    own enum's, which fix makes the patched file's member of the same name."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 2)
        self.reduction = Reduction.SUM

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        err = self.lin(x).pow(2)
        kept = err > 0.1
        n = int(kept.sum())  # SITE: count kept a tensor
        total = (err * kept).sum() / max(n, 1)
        return total if self.reduction == Reduction.SUM else total / err.shape[-1]


def enum_setting() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(953)
    return EnumSetting(), (torch.randn(6, 4),)



class SmoothedValue:
    """A window of a meter's values and their running total (in our words, as the training
    scripts of DeiT, MAE and ConvNeXt keep them)."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self.total: Any = 0.0
        self.count = 0

    def update(self, value: Any, n: int = 1) -> None:
        self.values.append(value)
        self.count += n
        self.total += value * n


class MetricLogger:
    """Those scripts' ``MetricLogger.update``: a tensor read back, then checked to be a number."""

    def __init__(self) -> None:
        self.meters: dict[str, SmoothedValue] = {}

    def update(self, **kwargs: Any) -> None:
        for k, v in kwargs.items():
            if v is None:
                continue
            if isinstance(v, torch.Tensor):
                v = v.item()  # SITE: keep it a tensor, its type check taking one
            assert isinstance(v, (float, int))
            self.meters.setdefault(k, SmoothedValue()).update(v)


class LoggedTrainStep(nn.Module):
    """A training step's forward that hands its loss and learning rate to the metric logger."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 3))
        self.metric_logger = MetricLogger()
        self.lr = 1e-3

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(self.net(x), y)
        self.metric_logger.update(loss=loss, lr=self.lr, skipped=None)
        return loss


def logged_train_step() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(3)
    return LoggedTrainStep(), (_x(5, 6), torch.tensor([0, 2, 1, 1, 0]))


#: Every program of this corpus: name -> builder.
PROGRAMS = {
    "distill": distill,
    "ema_teacher": ema_teacher,
    "saliency": saliency,
    "guided_sampler": guided_sampler,
    "gradient_penalty": gradient_penalty,
    "saliency_leak": saliency_leak,
    "lazy_head": lazy_head,
    "episode": episode,
    "outliers": outliers,
    "nucleus": nucleus,
    "prompt": prompt,
    "greedy_buffer": greedy_buffer,
    "greedy_list": greedy_list,
    "rollout": rollout,
    "nanogpt": nanogpt,
    "accumulating": accumulating,
    "reporting": reporting,
    "eval_mean": eval_mean,
    "metered_step": metered_step,
    "trusted": trusted,
    "mixed_blocks": mixed_blocks,
    "enum_setting": enum_setting,
    "logged_train_step": logged_train_step,
}

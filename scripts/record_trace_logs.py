"""Record real TORCH_TRACE logs, written by torch itself, as test data for one torch release.

Standalone (torch, numpy and the repo's tests/corpus modules; no dynscope import) so it runs
in a side venv with another torch. One command per release, one job at a time:

    CUDA_VISIBLE_DEVICES="" /work/venv-2.11/bin/python scripts/record_trace_logs.py
    CUDA_VISIBLE_DEVICES="" /work/main/.venv/bin/python scripts/record_trace_logs.py
    CUDA_VISIBLE_DEVICES="" /work/venv-2.14/bin/python scripts/record_trace_logs.py

``scripts/record_trace_logs.py TARGET ...`` records only those targets: corpus program names
(tests/corpus/programs.py), ``inductor-train`` and ``ddp-2ranks``. Everything lands in
``tests/traces/torch-<major.minor>/logs/``:

- ``corpus-<program>.log``: each corpus program compiled as scripts/record_corpus.py compiles
  it (``torch._dynamo.reset()``, ``torch.compile(model, backend="eager")``, the program's
  calls in order), in a child process of its own with ``TORCH_TRACE`` set to a fresh folder.
- ``inductor-train.log``: two SGD steps of a 2-layer MLP with a ``print`` graph break
  between the layers, compiled with the default Inductor backend (fresh
  ``TORCHINDUCTOR_CACHE_DIR``, provenance tracking on where the release has it), so the log
  carries AOTAutograd's forward and backward graphs and Inductor's output code.
- ``vit-tiny.log.gz``: a ViT-shaped model of 12 pre-norm attention blocks (tiny widths, the
  layer structure of ViT-tiny) compiled with the default Inductor backend, called at batch 1
  then 4 (a recompile to a dynamic batch, whose size every view reads): AOT graphs of about
  a thousand nodes, the pictures that once kept Graphviz busy for half an hour. Gzipped, as
  tools that copy logs off a cluster often leave them.
- ``aoti-export.log``: a 2-layer MLP exported (``torch.export.export``) and compiled ahead of
  time with ``torch._inductor.aoti_compile_and_package`` (AOTInductor, fresh Inductor cache):
  one ``compilation_metrics`` record without a compile id, the AOT inference graph, the C++
  wrapper and kernels, and the compile steps.
- ``ddp-2ranks/``: both rank logs of a real 2-rank gloo DDP job (``torch.distributed.run``),
  file names as torch wrote them (``dedicated_log_torch_trace_rank_<r>_<random>.log``). It is
  examples/ddp_two_ranks.py with its plants on and without dynscope: rank 1 prints inside
  forward (a break only rank 1 has) and runs batch 7 on step 1 (a recompile only rank 1 has).

Every child runs with ``CUDA_VISIBLE_DEVICES=""`` and ``OMP_NUM_THREADS=1``. The parent moves
the log file(s) each child wrote into place and fails loudly when the count is not the
expected one; it then prints each file's size and record count.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from record_corpus import _call  # noqa: E402 - report()'s rule for one entry of calls, shared

SCRIPT = Path(__file__).resolve()
INDUCTOR_TARGET = "inductor-train"
VIT_TARGET = "vit-tiny"
AOTI_TARGET = "aoti-export"
DDP_TARGET = "ddp-2ranks"
DDP_WIDTH = 512  # 512 x 512 float32 = 1 MiB per layer: with bucket_cap_mb=1, one bucket per layer
LOG_PREFIX = "dedicated_log_torch_trace_"  # torch/_logging/_internal.py LOG_PREFIX
SIZE_LIMIT = 400_000  # bytes: the logs are test data checked into the repo


# --- children: what runs with TORCH_TRACE set ---------------------------------------------


def child_corpus(name: str) -> None:
    """Compile one corpus program exactly as scripts/record_corpus.py does."""
    import torch._dynamo

    from tests.corpus.programs import PROGRAMS  # needs ROOT on sys.path

    (prog,) = [p for p in PROGRAMS if p.name == name]
    torch._dynamo.reset()
    model, calls = prog.make()
    compiled = torch.compile(model, backend="eager")
    for value in calls:
        args, kwargs = _call(value)
        compiled(*args, **kwargs)


class TwoLayerMlp(torch.nn.Module):
    """Linear 32->64, relu, a print (a graph break), Linear 64->8."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.fc2 = torch.nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        print("between layers")  # the graph break: two forward graphs, two backward graphs
        return self.fc2(h)


class _VitBlock(torch.nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.fc1 = torch.nn.Linear(dim, 4 * dim)
        self.fc2 = torch.nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm2(x))))


class _Vit(torch.nn.Module):
    def __init__(self, dim: int = 32, depth: int = 12, heads: int = 2, patch: int = 8, image: int = 32) -> None:
        super().__init__()
        self.patch = torch.nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = torch.nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = torch.nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, dim))
        self.blocks = torch.nn.Sequential(*(_VitBlock(dim, heads) for _ in range(depth)))
        self.norm = torch.nn.LayerNorm(dim)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = self.patch(pixels).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.norm(self.blocks(x))[:, 0]


def child_vit() -> None:
    """The ViT-shaped model under default Inductor, at batch 1 then 4 (see the module)."""
    torch.manual_seed(0)
    compiled = torch.compile(_Vit().eval())
    with torch.no_grad():
        for batch in (1, 4):
            compiled(torch.randn(batch, 3, 32, 32))


def child_aoti() -> None:
    """The MLP exported and compiled ahead of time with AOTInductor (see the module)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    exported = torch.export.export(model, (torch.randn(4, 8),))
    with tempfile.TemporaryDirectory(prefix="dynscope-aoti-") as tmp:
        torch._inductor.aoti_compile_and_package(exported, package_path=str(Path(tmp) / "mlp.pt2"))


def child_inductor_train() -> None:
    """Two SGD steps of TwoLayerMlp compiled with the default Inductor backend."""
    import torch._dynamo
    import torch._inductor.config as inductor_config

    # Feature-detected as dynscope/_torch/inductor.py does: the setting is
    # trace.provenance_tracking_level from torch 2.9, trace.provenance_tracking before.
    if hasattr(inductor_config.trace, "provenance_tracking_level"):
        inductor_config.trace.provenance_tracking_level = 1
    elif hasattr(inductor_config.trace, "provenance_tracking"):
        inductor_config.trace.provenance_tracking = True
    else:
        print("this torch has no Inductor provenance tracking setting", file=sys.stderr)
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = TwoLayerMlp()
    compiled = torch.compile(model)  # the model only; the optimizer step stays eager
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(2):
        x, y = torch.randn(16, 32), torch.randn(16, 8)
        loss = torch.nn.functional.mse_loss(compiled(x), y)
        loss.backward()  # AOTAutograd compiles the backward graphs on the first step
        opt.step()
        opt.zero_grad()


class DdpMlp(torch.nn.Module):
    """examples/ddp_two_ranks.py's Mlp: three Linear(512, 512), one gradient bucket each."""

    def __init__(self, plant_break: bool) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(DDP_WIDTH, DDP_WIDTH) for _ in range(3))
        self.plant_break = plant_break

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.layers[0](x))
        if self.plant_break:
            print("rank-dependent print")  # a graph break on this rank only
        x = torch.relu(self.layers[1](x))
        return torch.relu(self.layers[2](x))


def child_ddp(steps: int = 3) -> None:
    """One rank of examples/ddp_two_ranks.py --plant --no-dynscope (run under torchrun)."""
    import torch.distributed as dist

    # Before any compile: the trace file opens on the first record and takes its
    # rank_<r>_ name only when the process group is up by then.
    dist.init_process_group("gloo")
    try:
        rank = dist.get_rank()
        torch.manual_seed(0)
        model = DdpMlp(plant_break=rank == 1)
        # Compile the module DDP wraps: DDP's optimizer then splits its graph at buckets.
        ddp = torch.nn.parallel.DistributedDataParallel(
            torch.compile(model, backend="eager"), bucket_cap_mb=1
        )
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        for step in range(steps):
            batch = 7 if (rank == 1 and step == 1) else 8  # a recompile on rank 1 only
            loss = ddp(torch.randn(batch, DDP_WIDTH)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        dist.barrier()
    finally:
        dist.destroy_process_group()


# --- parent: run the children, move their logs into place ---------------------------------


def _child_env(trace_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a recording child: TORCH_TRACE on, CPU only, one OpenMP thread."""
    env = dict(os.environ)
    env.update(TORCH_TRACE=str(trace_dir), CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", **extra)
    return env


def _run(cmd: list[str], env: dict[str, str], what: str) -> None:
    """Run one child; a failing child stops the recording with its output shown."""
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-8000:])
        raise SystemExit(f"{what}: the child exited with {done.returncode}: {' '.join(cmd)}")


def _logs_in(trace_dir: Path) -> list[Path]:
    return sorted(p for p in trace_dir.iterdir() if p.is_file())


def _only_log(trace_dir: Path, what: str) -> Path:
    """The one file a child wrote under TORCH_TRACE; anything else is an error."""
    found = _logs_in(trace_dir)
    if len(found) != 1 or not found[0].name.startswith(LOG_PREFIX):
        names = ", ".join(p.name for p in found) or "nothing"
        raise SystemExit(f"{what}: expected exactly one {LOG_PREFIX}*.log in {trace_dir}, found {names}")
    return found[0]


def record_count(path: Path) -> int:
    """Records in a TORCH_TRACE log: every line that is not a tab-led payload line."""
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        return sum(1 for line in lines if line.strip() and not line.startswith("\t"))


def record_corpus(name: str, folder: Path) -> list[Path]:
    """corpus-<name>.log, from a child compiling the program with TORCH_TRACE set."""
    with tempfile.TemporaryDirectory(prefix="dynscope-trace-") as tmp:
        trace_dir = Path(tmp)
        _run([sys.executable, str(SCRIPT), "--child", name], _child_env(trace_dir), name)
        target = folder / f"corpus-{name}.log"
        shutil.move(_only_log(trace_dir, name), target)
    return [target]


def _record_inductor_child(folder: Path, target: str, *, gzipped: bool = False) -> list[Path]:
    """<target>.log (or .log.gz), from a child with a fresh Inductor cache (every compile a
    miss) and one compile thread (no worker pool on a shared 2-core machine, and every record
    comes from the one process that owns the trace file)."""
    import gzip

    with tempfile.TemporaryDirectory(prefix="dynscope-trace-") as tmp:
        trace_dir = Path(tmp) / "trace"
        env = _child_env(trace_dir, TORCHINDUCTOR_CACHE_DIR=str(Path(tmp) / "inductor-cache"),
                         TORCHINDUCTOR_COMPILE_THREADS="1")
        trace_dir.mkdir()
        _run([sys.executable, str(SCRIPT), "--child", target], env, target)
        log = _only_log(trace_dir, target)
        if not gzipped:
            dest = folder / f"{target}.log"
            shutil.move(log, dest)
            return [dest]
        dest = folder / f"{target}.log.gz"
        with log.open("rb") as src, gzip.open(dest, "wb") as dst:
            shutil.copyfileobj(src, dst)
        return [dest]


def record_ddp(folder: Path) -> list[Path]:
    """ddp-2ranks/: the rank_0 and rank_1 logs of a torchrun job, names as torch chose them."""
    out = folder / DDP_TARGET
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.iterdir():  # rank log names are random: an old run's would linger
        stale.unlink()
    with tempfile.TemporaryDirectory(prefix="dynscope-trace-") as tmp:
        trace_dir = Path(tmp)
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            str(SCRIPT),
            "--ddp",
        ]
        _run(cmd, _child_env(trace_dir), DDP_TARGET)
        found = _logs_in(trace_dir)
        ranks = sorted(
            p.name.removeprefix(LOG_PREFIX).split("_")[1]
            for p in found
            if p.name.startswith(LOG_PREFIX + "rank_")
        )
        if len(found) != 2 or ranks != ["0", "1"]:
            names = ", ".join(p.name for p in found) or "nothing"
            raise SystemExit(
                f"{DDP_TARGET}: expected one {LOG_PREFIX}rank_<r>_*.log per rank 0 and 1, found {names}"
            )
        targets = []
        for path in found:
            targets.append(out / path.name)
            shutil.move(path, targets[-1])
    return targets


def main(argv: list[str]) -> int:
    """Record the chosen targets (all when none are named) and print what was written."""
    from tests.corpus.programs import PROGRAMS  # needs ROOT on sys.path

    corpus = [p.name for p in PROGRAMS]
    known = [*corpus, INDUCTOR_TARGET, VIT_TARGET, AOTI_TARGET, DDP_TARGET]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", metavar="TARGET", help=f"any of: {', '.join(known)}")
    parser.add_argument("--child", choices=[*corpus, INDUCTOR_TARGET, VIT_TARGET, AOTI_TARGET], help=argparse.SUPPRESS)
    parser.add_argument("--ddp", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv[1:])
    if args.ddp:  # one rank of the torchrun job
        child_ddp()
        return 0
    if args.child == INDUCTOR_TARGET:
        child_inductor_train()
        return 0
    if args.child == VIT_TARGET:
        child_vit()
        return 0
    if args.child == AOTI_TARGET:
        child_aoti()
        return 0
    if args.child:
        child_corpus(args.child)
        return 0
    unknown = sorted(set(args.targets) - set(known))
    if unknown:
        print(f"unknown target(s) {', '.join(unknown)}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    chosen = [t for t in known if not args.targets or t in args.targets]
    version = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    folder = ROOT / "tests" / "traces" / f"torch-{version}" / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    print(f"torch {torch.__version__} -> {folder.relative_to(ROOT)}")
    total = 0
    for target in chosen:
        if target in (INDUCTOR_TARGET, AOTI_TARGET, VIT_TARGET):
            written = _record_inductor_child(folder, target, gzipped=target == VIT_TARGET)
        elif target == DDP_TARGET:
            written = record_ddp(folder)
        else:
            written = record_corpus(target, folder)
        for path in written:
            size = path.stat().st_size
            total += size
            flag = f"  OVER {SIZE_LIMIT // 1000} KB" if size > SIZE_LIMIT else ""
            print(f"{path.relative_to(folder)}: {size} bytes, {record_count(path)} records{flag}", flush=True)
    print(f"total {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

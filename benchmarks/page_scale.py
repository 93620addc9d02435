"""How big is the page of a big model, and how fast does its first screen paint?

Builds a 12-layer GPT-2 from a small config (no downloads) and, when ``diffusers`` is
installed, a tiny UNet2DConditionModel; runs dynscope.report on each (eager inner
backend), renders the bundle and prints index.html's size and the first paint in headless
Chromium (the page's own script records the first-contentful-paint time and the load
time on <html>; measured without virtual time, so these are real milliseconds), next to
the targets: index.html <= 1.5 MB, first paint < 1 s.

Run:  .venv/bin/python benchmarks/page_scale.py [OUT_DIR]
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dynscope

TARGET_BYTES = 1_500_000
TARGET_PAINT_MS = 1000
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]


def gpt2() -> tuple[Any, dict[str, Any]]:
    """A 12-layer GPT-2 with a small config, and one call's inputs."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=12, n_embd=64, n_head=4, vocab_size=256, n_positions=64)
    model = GPT2LMHeadModel(config).eval()
    return model, {"input_ids": torch.randint(0, 256, (1, 16))}


def unet() -> tuple[Any, dict[str, Any]] | None:
    """A tiny UNet2DConditionModel, or None when diffusers is not installed."""
    try:
        from diffusers import UNet2DConditionModel
    except ImportError:
        return None
    model = UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=2,
        block_out_channels=(32, 64), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32, attention_head_dim=8,
        norm_num_groups=8,
    ).eval()
    inputs = {
        "sample": torch.randn(1, 4, 16, 16), "timestep": torch.tensor([10]),
        "encoder_hidden_states": torch.randn(1, 8, 32), "return_dict": False,
    }
    return model, inputs


def first_paint(page: Path, profile: Path) -> tuple[int | None, int | None, float]:
    """(first paint ms, load ms, Chromium's wall seconds) for ``page``.

    Chromium takes a screenshot of the first screen (1300x1000) as it dumps the DOM: that
    makes it paint, so the page's first-contentful-paint entry exists; where it does not,
    the first animation frame's time stands in.
    """
    chromium = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    if chromium is None:
        return None, None, 0.0
    start = time.perf_counter()
    res = subprocess.run(
        [chromium, *FLAGS, f"--user-data-dir={profile}", "--window-size=1300,1000",
         f"--screenshot={profile / 'first-screen.png'}", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=300,
    )
    wall = time.perf_counter() - start
    root = re.search(r"<html[^>]*>", res.stdout)
    attrs = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', root.group(0) if root else ""))
    paint = attrs.get("paint-ms") or attrs.get("frame-ms")
    load = attrs.get("load-ms")
    return (int(paint) if paint else None), (int(load) if load else None), wall


def measure(name: str, model: Any, inputs: dict[str, Any], out: Path) -> None:
    start = time.perf_counter()
    with torch.no_grad():
        rep = dynscope.report(model, inputs)
    t_report = time.perf_counter() - start
    start = time.perf_counter()
    folder = rep.render(out / name)
    t_render = time.perf_counter() - start
    page = folder / "index.html"
    size = page.stat().st_size
    html = page.read_text()
    inline, off, folded = (len(re.findall(f'<section [^>]*data-picture="{kind}"', html))
                           for kind in ("inline", "off-page", "folded"))
    repeats = sum(g.to_dot().count("(identical blocks, drawn once)") for g in rep.graphs)
    paint, load, wall = first_paint(page, out / f"{name}-profile")
    print(f"\n{name}: {rep.graph_count} graphs ({folded} folded into another), "
          f"{sum(g.node_count for g in rep.graphs)} nodes; report {t_report:.1f} s, render {t_render:.1f} s")
    print(f"  pictures: {inline} inline, {off} off the page; {repeats} repeated-block boxes drawn once")
    ok = "ok" if size <= TARGET_BYTES else "OVER"
    print(f"  index.html {size / 1e6:.2f} MB (target <= {TARGET_BYTES / 1e6:.1f} MB): {ok}")
    if paint is None and load is None:
        print("  first paint: not measured (no Chromium, or the page recorded nothing)")
        return
    shown = paint if paint is not None else load
    what = "first paint" if paint is not None else "load (no paint entry)"
    ok = "ok" if shown is not None and shown < TARGET_PAINT_MS else "OVER"
    print(f"  {what} {shown} ms, load {load} ms, Chromium run {wall:.1f} s "
          f"(target first paint < {TARGET_PAINT_MS} ms): {ok}")


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="page-scale-"))
    print(f"bundles in {out}; torch {torch.__version__}")
    measure("gpt2-12-layer", *gpt2(), out)
    made = unet()
    if made is None:
        print("\nunet: skipped (diffusers is not installed; pip install diffusers to measure it)")
    else:
        measure("unet-tiny", *made, out)


if __name__ == "__main__":
    main()

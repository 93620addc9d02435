"""A seventh held-out set for ``dynscope.fix``, written without reading its rewrites.

Programs in the shapes real repositories have, from domains the first six held-out sets do not
cover: FPN RoI level routing, CenterNet peak decoding, per-clip loudness normalisation, a YIN pitch
tracker, spectral-flux onset detection, a Hugging Face-style encoder with its padding warning and
unmasked fast path, extractive-QA span decoding, CTRL's repetition penalty, SASRec next-item scoring
with seen-item filtering, a CTR model remapping raw ids through a vocabulary dict, PPO with GAE,
an actor-critic rollout against a pure-Python CartPole, SAC entropy tuning, a SchNet-style radius
graph, an adaptive RK23 neural ODE, RevIN + DLinear forecasting, a GAT over an edge list with
isolated nodes, a DDIM sampler with classifier-free guidance and dynamic thresholding, a Heun sampler
over Karras sigmas, a lazily cloned EMA model, gradient accumulation skipping non-finite micro-batches,
CE + Dice with an ignore label, a binned ECE, and an sklearn-style AUROC.

Each builder returns a fresh ``(model or function, inputs)``; every line where PyTorch 2.13
graph-breaks in these files carries ``# BREAK: ...`` (a source rewrite can keep outputs and
gradients) or ``# BREAK must-not: ...`` (none can).  ``python -m tests.corpus.fix_heldout7.check``
checks the marks and the hand-written ``reference_rewrites`` against PyTorch alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import audio, diffusion, graph, metrics, recsys, rl, science, text, timeseries, training, vision

if TYPE_CHECKING:
    from collections.abc import Callable

PROGRAMS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "fpn_roi_levels": vision.build_fpn_roi_levels,
    "centernet_decode": vision.build_centernet_decode,
    "loudness_norm": audio.build_loudness_norm,
    "yin_pitch": audio.build_yin_pitch,
    "onset_detect": audio.build_onset_detect,
    "hf_encoder": text.build_hf_encoder,
    "qa_span": text.build_qa_span,
    "rep_penalty": text.build_rep_penalty,
    "sasrec_last": recsys.build_sasrec_last,
    "id_remap": recsys.build_id_remap,
    "ppo_gae": rl.build_ppo_gae,
    "cartpole_rollout": rl.build_cartpole_rollout,
    "sac_alpha": rl.build_sac_alpha,
    "schnet_radius": science.build_schnet_radius,
    "adaptive_rk": science.build_adaptive_rk,
    "revin_dlinear": timeseries.build_revin_dlinear,
    "gat_edges": graph.build_gat_edges,
    "ddim_cfg": diffusion.build_ddim_cfg,
    "karras_heun": diffusion.build_karras_heun,
    "ema_lazy": training.build_ema_lazy,
    "skip_nonfinite": training.build_skip_nonfinite,
    "dice_ignore": training.build_dice_ignore,
    "ece_binned": metrics.build_ece_binned,
    "auroc": metrics.build_auroc,
}

__all__ = ["PROGRAMS"]

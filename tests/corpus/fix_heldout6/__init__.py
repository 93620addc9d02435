"""A sixth held-out set for ``dynscope.fix``, written without reading its rewrites.

Programs in the shapes real repositories have, from domains the first five held-out sets do not cover: an
AAM-softmax speaker head with hard negatives, an energy VAD gate before statistics pooling, a Pan-Tompkins
ECG R-peak detector, a chunked Mamba-style selective scan, a folding decoder with a chamfer loss over padded
point clouds, an unsupervised optical-flow loss with an occlusion threshold, a pose heatmap head with a
confidence gate, a land-masked patch encoder for sea-surface fields, a Sinkhorn matcher with a convergence
check, a VQ codebook with dead-code reset, a multi-similarity miner, top-k graph pooling, a CTR model
calibrated by histogram binning, a tabular normaliser set up from its first batch, FedAvg with clipped
client updates, MC-dropout with numpy bucketing, a self-paced curriculum loss, a clipped WGAN critic, FGSM
adversarial training, a warmed-up LoRA adapter, an annealed Gumbel-softmax quantiser, GNMT length-penalty
rescoring, adaptive-span attention, an H2O heavy-hitter KV cache.

Each builder returns a fresh ``(model or function, inputs)``; every line where PyTorch 2.13
graph-breaks in these files carries ``# BREAK: ...`` (a source rewrite can keep outputs and
gradients) or ``# BREAK must-not: ...`` (none can).  ``python -m tests.corpus.fix_heldout6.check``
checks the marks and the hand-written ``reference_rewrites`` against PyTorch alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import geometry, sequence, signals, speech, structured, tabular, training, vision

if TYPE_CHECKING:
    from collections.abc import Callable

PROGRAMS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "aam_speaker": speech.build_aam_speaker,
    "vad_pool": speech.build_vad_pool,
    "ecg_rpeak": signals.build_ecg_rpeak,
    "ssm_scan": signals.build_ssm_scan,
    "chamfer": geometry.build_chamfer,
    "flow_warp": geometry.build_flow_warp,
    "pose_heatmap": vision.build_pose_heatmap,
    "weather_patch": vision.build_weather_patch,
    "sinkhorn_match": structured.build_sinkhorn_match,
    "vq_reset": structured.build_vq_reset,
    "ms_miner": structured.build_ms_miner,
    "topk_pool": structured.build_topk_pool,
    "ctr_calib": tabular.build_ctr_calib,
    "tab_norm": tabular.build_tab_norm,
    "fed_avg": tabular.build_fed_avg,
    "mc_dropout": tabular.build_mc_dropout,
    "curriculum": training.build_curriculum,
    "wgan_clip": training.build_wgan_clip,
    "fgsm": training.build_fgsm,
    "warmup_lora": training.build_warmup_lora,
    "temp_anneal": training.build_temp_anneal,
    "length_penalty": sequence.build_length_penalty,
    "window_attn": sequence.build_window_attn,
    "kv_evict": sequence.build_kv_evict,
}

__all__ = ["PROGRAMS"]

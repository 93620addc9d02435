"""A fourth held-out set for ``dynscope.fix``, written without reading its rewrites.

Programs in the shapes real repositories have, from domains the first three held-out sets do not
cover: a Gram-matrix style loss, a super-resolution net with PSNR in forward, ToMe token merging,
a contrastive audio-text head with a temperature schedule, ASR hypothesis length normalisation,
a popularity-debiased recommender, LambdaRank, a NeRF ray sampler, a physics-informed loss with
boundary points, NaN-masked weather targets, a modern Hopfield layer, capsule routing, an
uncertainty-weighted multi-task loss, a sparse autoencoder resampling dead latents, a
reconstruction anomaly detector, ALiBi attention, scheduled sampling, an OCR blank-ratio guard.

Each builder returns a fresh ``(model or function, inputs)``; every line where PyTorch 2.13
graph-breaks in these files carries ``# BREAK: ...`` (a source rewrite can keep outputs and
gradients) or ``# BREAK must-not: ...`` (none can).  ``python -m tests.corpus.fix_heldout4.check``
checks the marks and the hand-written ``reference_rewrites`` against PyTorch alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import audio, memory, ranking, science, text, training, vision

if TYPE_CHECKING:
    from collections.abc import Callable

PROGRAMS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "gram_style": vision.build_gram_style,
    "sr_psnr": vision.build_sr_psnr,
    "tome_merge": vision.build_tome_merge,
    "audio_contrast_temp": audio.build_audio_contrast_temp,
    "asr_length_norm": audio.build_asr_length_norm,
    "popularity_bias": ranking.build_popularity_bias,
    "lambdarank": ranking.build_lambdarank,
    "nerf_sampler": science.build_nerf_sampler,
    "pinn_boundary": science.build_pinn_boundary,
    "weather_nan": science.build_weather_nan,
    "hopfield": memory.build_hopfield,
    "capsule_routing": memory.build_capsule_routing,
    "multitask_uncertainty": training.build_multitask_uncertainty,
    "sae_resample": training.build_sae_resample,
    "anomaly_threshold": training.build_anomaly_threshold,
    "alibi": text.build_alibi,
    "scheduled_sampling": text.build_scheduled_sampling,
    "ocr_blank": text.build_ocr_blank,
}

__all__ = ["PROGRAMS"]

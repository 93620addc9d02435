"""A second held-out set for ``dynscope.fix``, written without reading its rewrites.

Programs in the shapes real repositories have, from domains the first held-out set does not
cover: diffusion schedulers, T5 relative position bias, CTC decoding, a tokenizer-side mask
helper, CLIP, triplet mining, distillation, graph and tree models, a DLRM, a VAE, a mixture
density network, a Kalman filter, a forecaster, segmentation post-processing, an MAE encoder,
a dynamic loss scale, label smoothing, a curriculum sampler.

Each builder returns a fresh ``(model or function, inputs)``; every line where PyTorch 2.13
graph-breaks in these files carries ``# BREAK: ...`` (a source rewrite can keep outputs and
gradients) or ``# BREAK must-not: ...`` (none can).  ``python -m tests.corpus.fix_heldout2.check``
checks the marks and the hand-written ``reference_rewrites`` against PyTorch alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import contrastive, diffusion, generative, graph, losses, recsys, text, timeseries, vision

if TYPE_CHECKING:
    from collections.abc import Callable

PROGRAMS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "ddpm_step": diffusion.build_ddpm_step,
    "ddim_sample": diffusion.build_ddim_sample,
    "t5_position_bias": text.build_t5_position_bias,
    "ctc_greedy_decode": text.build_ctc_greedy_decode,
    "decoder_inputs": text.build_decoder_inputs,
    "clip_loss": contrastive.build_clip_loss,
    "triplet_hard_mining": contrastive.build_triplet_hard_mining,
    "kd_temperature": contrastive.build_kd_temperature,
    "gcn_layer": graph.build_gcn_layer,
    "graphsage_neighbors": graph.build_graphsage_neighbors,
    "tree_rnn": graph.build_tree_rnn,
    "dlrm_embedding_bags": recsys.build_dlrm_embedding_bags,
    "vae_kl_anneal": generative.build_vae_kl_anneal,
    "mdn_head": generative.build_mdn_head,
    "kalman_filter": timeseries.build_kalman_filter,
    "ar_forecast": timeseries.build_ar_forecast,
    "seg_postprocess": vision.build_seg_postprocess,
    "mae_vit_patches": vision.build_mae_vit_patches,
    "amp_loss_scale": losses.build_amp_loss_scale,
    "label_smoothing": losses.build_label_smoothing,
    "curriculum_sampler": losses.build_curriculum_sampler,
}

__all__ = ["PROGRAMS"]

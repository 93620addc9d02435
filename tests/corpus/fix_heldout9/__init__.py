"""A ninth held-out set for ``dynscope.fix``, written without reading its rewrites.

Programs in the shapes real repositories have, from domains the first eight held-out sets do not
cover: wav2vec 2.0 CTC fine-tuning with SpecAugment's ``mask_time_indices`` and LayerDrop, Whisper's
timestamp logit rules, SepFormer's permutation-invariant SI-SNR, Mixtral's top-2 expert routing, LLaVA
splicing image features into image-token positions, MosaicBERT's unpadded encoder, ColBERT's late
interaction with a punctuation skiplist, fairseq's kNN-LM, MEGABYTE byte sampling decoded to text,
torchvision's RetinaNet losses (low-quality matches, normalised by the foreground count) and its
detection post-processing with NMS, Segment Anything's point prompts, two-stage Deformable DETR, MONAI's
sliding-window inference with a Gaussian importance map, Grounding DINO's sub-sentence text masks, a
Decision Transformer training step, an OGB molecule property step over labelled targets, GraphGPS's
dense batching for global attention, PyG's grid sampling of point clouds, RotatE's self-adversarial
negative sampling, OpenFold-style recycling with an early-stop tolerance, a pure-PyTorch Gaussian
splatting rasteriser with densification statistics, Autoformer's auto-correlation, the Anomaly
Transformer's threshold and point-adjusted scores, TabNet's sparsemax steps with its batch logs, and
LLaDA's masked-diffusion sampler.

Each builder returns a fresh ``(model or function, inputs)``; every line where PyTorch 2.13
graph-breaks in these files carries ``# BREAK: ...`` (a source rewrite can keep outputs and
gradients) or ``# BREAK must-not: ...`` (none can).  ``python -m tests.corpus.fix_heldout9.check``
checks the marks and the hand-written ``reference_rewrites`` against PyTorch alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import generative, graph, nlp, rl, science, speech, tabular, timeseries, vision

if TYPE_CHECKING:
    from collections.abc import Callable

PROGRAMS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "wav2vec2_ctc": speech.build_wav2vec2_ctc,
    "whisper_timestamps": speech.build_whisper_timestamps,
    "sepformer_pit": speech.build_sepformer_pit,
    "mixtral_moe": nlp.build_mixtral_moe,
    "llava_merge": nlp.build_llava_merge,
    "mosaic_unpad": nlp.build_mosaic_unpad,
    "colbert": nlp.build_colbert,
    "knn_lm": nlp.build_knn_lm,
    "megabyte": nlp.build_megabyte,
    "retinanet_loss": vision.build_retinanet_loss,
    "retinanet_detect": vision.build_retinanet_detect,
    "sam_prompt": vision.build_sam_prompt,
    "deformable_two_stage": vision.build_deformable_two_stage,
    "monai_sliding_window": vision.build_monai_sliding_window,
    "grounding_text_mask": vision.build_grounding_text_mask,
    "decision_transformer": rl.build_decision_transformer,
    "ogb_molhiv": graph.build_ogb_molhiv,
    "graphgps_dense": graph.build_graphgps_dense,
    "grid_sampling": graph.build_grid_sampling,
    "rotate_kge": graph.build_rotate_kge,
    "af2_recycling": science.build_af2_recycling,
    "gsplat_render": science.build_gsplat_render,
    "autoformer_autocorr": timeseries.build_autoformer_autocorr,
    "anomaly_threshold": timeseries.build_anomaly_threshold,
    "tabnet_sparsemax": tabular.build_tabnet_sparsemax,
    "llada_sampling": generative.build_llada_sampling,
}

__all__ = ["PROGRAMS"]

"""A third held-out set for ``dynscope.fix``, written without reading its rewrites.

Programs in the shapes real repositories have, from domains the first two held-out sets do not
cover: BERT-style masking in forward, dynamic batch trimming, a CRF tagger, dynamic-NTK RoPE,
learned top-k attention, speculative decoding, YOLO target assignment, a DETR-style set loss,
PointNet++ sampling, a class-balanced focal loss, spectral norm, gradient reversal, a Gumbel
bottleneck, mixup, an early-exit classifier, quantization observers, magnitude pruning,
prioritized-replay DQN, a MoCo queue, tabular unknown categories, TransE negatives, SpecAugment.

Each builder returns a fresh ``(model or function, inputs)``; every line where PyTorch 2.13
graph-breaks in these files carries ``# BREAK: ...`` (a source rewrite can keep outputs and
gradients) or ``# BREAK must-not: ...`` (none can).  ``python -m tests.corpus.fix_heldout3.check``
checks the marks and the hand-written ``reference_rewrites`` against PyTorch alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import (
    attention,
    compression,
    decoding,
    detection,
    kg,
    pointcloud,
    rl,
    selfsup,
    speech,
    tabular,
    text,
    training,
)

if TYPE_CHECKING:
    from collections.abc import Callable

PROGRAMS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "bert_mlm": text.build_bert_mlm,
    "dynamic_truncation": text.build_dynamic_truncation,
    "crf_viterbi": text.build_crf_viterbi,
    "rope_ntk_scaling": attention.build_rope_ntk_scaling,
    "sparse_topk_attention": attention.build_sparse_topk_attention,
    "speculative_accept": decoding.build_speculative_accept,
    "yolo_targets": detection.build_yolo_targets,
    "detr_set_loss": detection.build_detr_set_loss,
    "pointnet_fps": pointcloud.build_pointnet_fps,
    "class_balanced_focal": training.build_class_balanced_focal,
    "spectral_norm": training.build_spectral_norm,
    "grad_reversal": training.build_grad_reversal,
    "gumbel_anneal": training.build_gumbel_anneal,
    "mixup": training.build_mixup,
    "early_exit": training.build_early_exit,
    "quant_observer": compression.build_quant_observer,
    "magnitude_pruning": compression.build_magnitude_pruning,
    "per_dqn": rl.build_per_dqn,
    "moco_queue": selfsup.build_moco_queue,
    "tabular_unknown": tabular.build_tabular_unknown,
    "kg_negative_sampling": kg.build_kg_negative_sampling,
    "specaugment": speech.build_specaugment,
}

__all__ = ["PROGRAMS"]

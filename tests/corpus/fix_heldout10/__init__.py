"""A tenth held-out set for ``dynscope.fix``, written without reading its rewrites.

Programs in the shapes real repositories have, from domains the first nine held-out sets do not cover:

* nlp.py -- OpenRLHF's DPO step (prompt tokens masked out of the log-probs, padding trimmed to the
  longest row), TRL's GRPO loss (completions cut after the first EOS, group-normalised advantages, the k3
  KL, metrics kept for logging), TRL's KTO loss (examples split by their desirable / undesirable label
  against a mismatched-pair KL baseline), a Medusa decoding step, a Switch Transformers sparse MLP with
  expert capacity, vLLM's reference paged-attention decode step over a block table, and a Hugging Face
  Trainer-style gradient-accumulation step that normalises by the tokens of the whole step;
* recsys.py -- DCN-v2 over TorchRec-style jagged sparse features, a two-tower retrieval step with in-batch
  negatives, streaming-frequency logQ correction and accidental-hit removal, LightGCN's full-ranking
  evaluation (training items excluded, recall / precision / NDCG at k);
* detection.py -- ultralytics' YOLOv8 task-aligned assigner and its CIoU / DFL box losses, Mask2Former's
  point-sampled mask losses, ByteTrack's two-stage association, MMDetection3D's dynamic PointPillars;
* vision.py -- VideoMAE pre-training with tube masking, nnU-Net's deep-supervision Dice + CE loss with an
  ignore label;
* audio.py -- fairseq's HuBERT masked prediction, HiFi-GAN's discriminator / generator / feature-matching /
  mel losses, a VITS training forward with monotonic alignment search and a random segment slice;
* rl.py -- muzero-general's n-step value targets and unrolled loss, torchbeast's IMPALA V-trace learner;
* science.py -- the E(3) equivariant diffusion model's training loss with its EGNN dynamics, ESM-1b's contact
  prediction scored by precision at L, an ODE-Net classifier with an adaptive Bogacki-Shampine solver;
* graph.py -- a GraphCast-style grid-mesh-grid weather step with a latitude-weighted, NaN-aware loss, and
  DiffPool over PyG's dense batching;
* helpers.py -- the shared utilities (a small causal LM, TRL's ``selective_log_softmax``, PyG-style
  ``scatter_sum`` / ``to_dense_batch`` / ``to_dense_adj``, box IoUs, VITS' ``commons`` slicing, EDM's
  masked-centering checks); several breaks sit in these helpers, reached from other files.

Each builder returns a fresh ``(model or function, inputs)``; every line where PyTorch 2.13
graph-breaks in these files carries ``# BREAK: ...`` (a source rewrite can keep outputs and
gradients) or ``# BREAK must-not: ...`` (none can).  ``python -m tests.corpus.fix_heldout10.check``
checks the marks and the hand-written ``reference_rewrites`` against PyTorch alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import audio, detection, graph, nlp, recsys, rl, science, vision

if TYPE_CHECKING:
    from collections.abc import Callable

PROGRAMS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "dpo_step": nlp.build_dpo_step,
    "grpo_loss": nlp.build_grpo_loss,
    "kto_loss": nlp.build_kto_loss,
    "medusa_step": nlp.build_medusa_step,
    "switch_capacity": nlp.build_switch_capacity,
    "paged_attention": nlp.build_paged_attention,
    "grad_accum": nlp.build_grad_accum,
    "dcnv2_jagged": recsys.build_dcnv2_jagged,
    "two_tower_logq": recsys.build_two_tower_logq,
    "lightgcn_eval": recsys.build_lightgcn_eval,
    "yolov8_assigner": detection.build_yolov8_assigner,
    "yolov8_loss": detection.build_yolov8_loss,
    "mask2former_points": detection.build_mask2former_points,
    "bytetrack_assoc": detection.build_bytetrack_assoc,
    "pointpillars_dynamic": detection.build_pointpillars_dynamic,
    "videomae_tube": vision.build_videomae_tube,
    "nnunet_deep_supervision": vision.build_nnunet_deep_supervision,
    "hubert_masked": audio.build_hubert_masked,
    "hifigan_losses": audio.build_hifigan_losses,
    "vits_mas": audio.build_vits_mas,
    "muzero_targets": rl.build_muzero_targets,
    "impala_learner": rl.build_impala_learner,
    "edm_egnn": science.build_edm_egnn,
    "esm_contact": science.build_esm_contact,
    "neural_ode": science.build_neural_ode,
    "graphcast_step": graph.build_graphcast_step,
    "diffpool": graph.build_diffpool,
}

__all__ = ["PROGRAMS"]

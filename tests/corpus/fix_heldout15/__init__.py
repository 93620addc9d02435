"""A fifteenth held-out set for ``dynscope.fix``, written without reading its rewrites.

Programs in the shapes real repositories have, from domains and repositories the earlier held-out sets do not
cover:

* pose.py -- leoxiaobin/deep-high-resolution-net.pytorch's training step (a SimpleBaseline ``PoseResNet``,
  ``JointsMSELoss`` with target weights, the PCK ``accuracy`` on the numpy heatmaps), open-mmlab/mmpose's
  ``TopDown.forward_test`` (flip test through the numpy ``flip_back``, ``keypoints_from_heatmaps`` with the default
  +/-0.25 shift read back with ``int()`` per keypoint, ``transform_preds``);
* detection.py -- open-mmlab/mmdetection's ``ATSSAssigner.assign`` (boolean-mask candidate writes, ``torch.nonzero``
  labels), facebookresearch/detectron2's RPN targets (``Matcher`` with ``set_low_quality_matches_``,
  ``subsample_labels``, the objectness loss over the valid anchors) and ROI heads (``_sample_proposals``,
  ``FastRCNNOutputLayers.box_reg_loss`` over the ``nonzero`` foreground, ``Box2BoxTransform``'s ``.item()`` assert);
* speech.py -- facebookresearch/fairseq's wav2vec 2.0 pre-training step (precomputed span masks, the masked steps
  selected by boolean indexing, ``GumbelVectorQuantizer``, ``sample_negatives``, ``compute_preds``' ``any()`` test,
  the InfoNCE criterion), ESPnet2's ``ESPnetASRModel.encode`` (the batch cut to its longest utterance, STFT / log-mel,
  ``SpecAug``'s ``mask_along_axis``, ``UtteranceMVN``, a Transformer encoder, ``make_pad_mask`` everywhere) and
  ESPnet1's ``E2E`` attention branch (``add_sos_eos``, ``LabelSmoothingLoss``, ``th_accuracy``);
* translation.py -- fairseq's ``TransformerModel`` under ``LabelSmoothedCrossEntropyCriterion`` with
  ``report_accuracy`` (the encoder's ``has_pads``, the decoder's padding test, ``compute_accuracy`` by
  ``masked_select``, ``utils.item`` logging);
* multimodal.py -- salesforce/BLIP's ``BLIP_Retrieval.forward`` (momentum encoders and queues,
  ``_dequeue_and_enqueue`` at ``int(self.ptr_queue)``, hard negatives drawn by ``torch.multinomial(...).item()``);
* recsys.py -- shenweichen/DeepCTR-Torch's ``DIN`` (``embedding_lookup`` / ``maxlen_lookup`` slicing by ``np.array``
  lookups, the attention pooling, the regularization and the numpy metric of ``fit``), RUCAIBox/RecBole's full-sort
  evaluation of ``SASRec`` (history masking, the ``rec.topk`` matrix, the numpy ``MRR`` and ``NDCG`` row loops);
* graph.py -- pyg-team/pytorch_geometric's ``GPSConv`` graph transformer (``to_dense_batch`` with its ``int()``
  sizes, ``h[mask]``, ``global_mean_pool``'s graph count);
* selfsup.py -- facebookresearch/swav's training iteration (the multi-crop forward through ``unique_consecutive``,
  ``distributed_sinkhorn``, the swapped prediction over ``np.delete``), microsoft/unilm's BEiT masked image modelling
  (``MaskingGenerator``, the masked tokens selected by boolean indexing, the loss checked with ``math.isfinite``);
* protein.py -- facebookresearch/esm's masked-marginal variant scoring (``ESM2.forward``'s ``padding_mask.any()``,
  ``label_row``'s ``score.item()``), aqlaboratory/openfold's validation metrics (``drmsd``'s ``n > 1`` guard,
  ``superimpose`` through ``masked_select`` and the numpy SVD superimposer, GDT);
* medical.py -- Project-MONAI/MONAI's segmentation step (``DiceCELoss`` with ``include_background=False`` and class
  weights: the ``.tolist()`` reduce axes and the weight check, ``AsDiscrete``, ``DiceMetric``);
* lm.py -- karpathy/nanoGPT's ``estimate_loss`` (``get_batch`` slicing the numpy tokens at ``torch.randint``
  offsets, ``losses[k] = loss.item()``, the printed report);
* text_recognition.py -- open-mmlab/mmocr's SAR test (``SAREncoder`` and ``ParallelSARDecoder`` through
  ``nn.LSTM``, ``AttnConvertor.tensor2idx``' ``.tolist()`` decoding);
* helpers.py -- the shared utilities (seeding, HRNet's ``get_max_preds`` and PCK ``accuracy``, ESPnet's
  ``make_pad_mask`` and ``th_accuracy``, fairseq's ``utils.item`` and ``buffered_arange``, BEiT's ``MetricLogger``);
  several breaks sit in these helpers, reached from other files (the PCK loops from pose.py, ``make_pad_mask``
  from four call sites in speech.py, ``th_accuracy`` from speech.py, ``utils.item`` from translation.py).

Each builder returns a fresh ``(model or function, inputs)``; every line where PyTorch 2.13
graph-breaks in these files carries ``# BREAK: ...`` (a source rewrite can keep outputs and
gradients) or ``# BREAK must-not: ...`` (none can).  ``python -m tests.corpus.fix_heldout15.check``
checks the marks and the hand-written ``reference_rewrites`` against PyTorch alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import (
    detection,
    graph,
    lm,
    medical,
    multimodal,
    pose,
    protein,
    recsys,
    selfsup,
    speech,
    text_recognition,
    translation,
)

if TYPE_CHECKING:
    from collections.abc import Callable

PROGRAMS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "hrnet_pose_train": pose.build_hrnet_pose_train,
    "mmpose_topdown_test": pose.build_mmpose_topdown_test,
    "atss_assign": detection.build_atss_assign,
    "detectron2_rpn": detection.build_detectron2_rpn,
    "detectron2_roi_heads": detection.build_detectron2_roi_heads,
    "wav2vec2_pretrain": speech.build_wav2vec2_pretrain,
    "espnet_asr_encode": speech.build_espnet_asr_encode,
    "espnet_e2e_att": speech.build_espnet_e2e_att,
    "fairseq_translation_step": translation.build_fairseq_translation_step,
    "blip_itm_retrieval": multimodal.build_blip_itm_retrieval,
    "din_train_step": recsys.build_din_train_step,
    "recbole_sasrec_eval": recsys.build_recbole_sasrec_eval,
    "pyg_gps_graph_clf": graph.build_pyg_gps_graph_clf,
    "swav_train_step": selfsup.build_swav_train_step,
    "beit_mim_step": selfsup.build_beit_mim_step,
    "esm_variant_scoring": protein.build_esm_variant_scoring,
    "openfold_val_metrics": protein.build_openfold_val_metrics,
    "monai_seg_step": medical.build_monai_seg_step,
    "nanogpt_eval": lm.build_nanogpt_eval,
    "mmocr_sar_test": text_recognition.build_mmocr_sar_test,
}

__all__ = ["PROGRAMS"]

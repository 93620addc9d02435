"""A twelfth held-out set for ``dynscope.fix``, written without reading its rewrites.

Programs in the shapes real repositories have, from domains the earlier held-out sets do not cover:

* timeseries.py -- zhouhaoyi/Informer2020's ProbSparse self-attention (``ProbAttention``: sampled keys,
  top-u queries, ``U_part`` from numpy's ``ceil(log(L))``) with distilling conv layers, thuml/Autoformer's
  ``AutoCorrelation`` (FFT autocorrelation, top-k delays aggregated by rolling the values) with its series
  decomposition;
* speech.py -- transformers' ``Wav2Vec2ForPreTraining`` (conv feature encoder, collator-drawn span masks and
  distractors, the Gumbel codebook quantizer and its perplexity, the contrastive loss with distractors equal to
  the positive pushed out), a HuBERT masked-prediction step in fairseq's shape whose model draws its
  SpecAugment spans itself (``HubertModel._mask_hidden_states``), clovaai/deep-text-recognition-benchmark's
  VGG + CTC recognizer validated through ``CTCLabelConverter.decode``, accuracy and normalised edit distance;
* tabular.py -- dreamquark-ai/tabnet's ``TabNet`` (categorical ``EmbeddingGenerator``, ghost batch norm, GLU
  blocks, attentive transformer with the sparsemax ``autograd.Function``, mask sparsity loss) under
  ``TabModel._train_batch``;
* language.py -- transformers' Switch Transformers (top-1 router with expert capacity, per-expert dispatch with
  dropped tokens passed through, router z-loss and load-balancing loss), TRL's ``DPOTrainer`` step
  (``concatenated_forward`` with ``flush_left``, completion-masked log-probs, sigmoid DPO loss against a frozen
  reference, reward and logit metrics);
* vision.py -- torchvision's FCOS (center-sampling matcher, ``FCOSHead.compute_loss`` over
  ``max(1, num_foreground)``), facebookresearch/Mask2Former's ``SetCriterion`` (point losses sampled by
  uncertainty, ``num_masks`` over workers) on the matcher's assignment, facebookresearch/segment-anything's
  prompt encoder with padded points and its mask decoder (``SamPredictor.predict_torch``), and
  graphdeco-inria/gaussian-splatting's densification: the per-iteration statistics of ``train.py`` /
  ``add_densification_stats`` and the periodic ``densify_and_prune``;
* rl.py -- kzl/decision-transformer's ``DecisionTransformer`` and ``SequenceTrainer.train_step`` on a batch
  from ``get_batch`` (numpy returns-to-go, left padding);
* learning.py -- aimagelab/mammoth's DER++ with its reservoir ``Buffer``, dragen1860/MAML-Pytorch's ``Meta``
  (functional ``Learner``, inner loop by ``torch.autograd.grad``, per-step accuracies), D-X-Y/AutoDL-Projects'
  GDAS search network on the NAS-Bench-201 cell;
* graphs.py -- graphdeeplearning/graphtransformer's ``GraphTransformerNet`` for SBM node classification
  (edge attention, Laplacian positional encodings with a random sign flip, class-balanced cross-entropy);
* helpers.py -- the shared utilities (seeding, an MLP, an attention block, transformers'
  ``_compute_mask_indices``, torchvision's focal and generalized-IoU losses, detectron2's point sampling,
  TRL's ``flush_left``, benchmarking-gnns' class weights); several breaks sit in these helpers, reached from
  other files.

Each builder returns a fresh ``(model or function, inputs)``; every line where PyTorch 2.13
graph-breaks in these files carries ``# BREAK: ...`` (a source rewrite can keep outputs and
gradients) or ``# BREAK must-not: ...`` (none can).  ``python -m tests.corpus.fix_heldout12.check``
checks the marks and the hand-written ``reference_rewrites`` against PyTorch alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import graphs, language, learning, rl, speech, tabular, timeseries, vision

if TYPE_CHECKING:
    from collections.abc import Callable

PROGRAMS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "informer_probsparse": timeseries.build_informer_probsparse,
    "autoformer_autocorr": timeseries.build_autoformer_autocorr,
    "wav2vec2_pretrain": speech.build_wav2vec2_pretrain,
    "hubert_masked_pred": speech.build_hubert_masked_pred,
    "ocr_ctc": speech.build_ocr_ctc,
    "tabnet_step": tabular.build_tabnet_step,
    "switch_moe": language.build_switch_moe,
    "dpo_flush_left": language.build_dpo_flush_left,
    "fcos_loss": vision.build_fcos_loss,
    "mask2former_criterion": vision.build_mask2former_criterion,
    "sam_prompt": vision.build_sam_prompt,
    "gaussian_stats": vision.build_gaussian_stats,
    "gaussian_densify": vision.build_gaussian_densify,
    "decision_transformer": rl.build_decision_transformer,
    "derpp_buffer": learning.build_derpp_buffer,
    "maml_inner": learning.build_maml_inner,
    "gdas_search": learning.build_gdas_search,
    "graph_transformer_sbm": graphs.build_graph_transformer_sbm,
}

__all__ = ["PROGRAMS"]

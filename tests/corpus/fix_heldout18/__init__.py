"""An eighteenth held-out set for ``dynscope.fix``, written without reading its rewrites.

Programs in the shapes real repositories have, from domains and repositories the earlier held-out sets do not
cover:

* enhancement.py -- haoxiangsnr/Wave-U-Net-for-Speech-Enhancement's ``Model`` (decimating encoder, linear-upsampling
  decoder with skips) under ``Trainer._validation_epoch``: fixed-length chunks, numpy round trips, the STOI / PESQ lists
  (numpy stand-ins in ``pystoi``'s shape, silent frames removed) and the mixed score;
* tagging.py -- minzwon/sota-music-tagging-models' ``ShortChunkCNN_Res`` on a mel front end under
  ``Solver.get_validation_score`` (``get_tensor``'s chunks, ``float(loss.data)``, ``np.array(out)``, ``get_auc``);
* registration.py -- yewzijian/RPMNet's ``RPMNetEarlyFusion`` (``query_ball_point`` / PPF features, slack
  ``sinkhorn``, weighted Kabsch) under one iteration of ``train.py`` (``compute_losses``, backward, Adam,
  ``save_summaries``);
* vos.py -- hkchengrex/STCN's ``InferenceCore`` / ``MemoryBank`` (top-k affinity) under the body of ``eval_davis.py``'s
  per-video loop, and the training ``STCN`` under ``STCNModel.do_pass``'s loss half (``LossComputer`` with
  ``BootstrappedCE`` and the ``selector`` test, ``Integrator.add_dict``);
* linkpred.py -- zfjsail/gae-pytorch's ``GCNModelVAE``, ``loss_function`` and ``get_roc_score`` under one epoch of
  ``gae_for`` (the Adam step, the printed line);
* distill.py -- HobbitLong/RepDistiller's CIFAR ``ResNet`` student / teacher with ``DistillKL`` and ``RKDLoss`` under
  the loss half of ``train_distill`` (``accuracy``, the ``AverageMeter`` updates);
* semiseg.py -- Haochen-Wang420/U2PL's ``train_semi.py`` iteration in its loss half (teacher pseudo-labels,
  ``compute_unsupervised_loss`` with the ``np.percentile`` entropy threshold, the meters);
* crowd.py -- ZhihengCV/Bayesian-Crowd-Counting's ``VGG`` regressor, ``Post_Prob`` and ``Bay_Loss`` under the loss
  half of ``RegTrainer.train_eopch``;
* lane.py -- cfzd/Ultra-Fast-Lane-Detection's ``parsingNet`` with the auxiliary branch, its losses and its numpy
  metrics (``AccTopk``, ``Metric_mIoU``'s ``fast_hist``) wired by ``get_loss_dict`` / ``get_metric_dict``, under the
  loss half of ``train``'s iteration;
* reid.py -- michuanhaohao/reid-strong-baseline's ``Baseline`` with ``TripletLoss`` (``hard_example_mining``),
  ``CenterLoss`` and the label-smoothed cross-entropy under the trainer's update, and ``R1_mAP`` with ``eval_func``;
* morph.py -- voxelmorph/voxelmorph's ``VxmDense`` (``Unet``, ``VecInt``, ``SpatialTransformer``) with ``NCC`` /
  ``Grad`` under the loss half of ``scripts/torch/train.py``'s step (the numpy volumes, the ``loss_list``);
* nowcasting.py -- Hzzone/Precipitation-Nowcasting's ConvLSTM ``Encoder`` / ``Forecaster`` with ``Weighted_mse_mae``
  and ``HKOEvaluation`` under the loss half of ``train_and_test``'s iteration at a test interval;
* protein.py -- dauparas/ProteinMPNN's training ``ProteinMPNN`` with ``featurize``, ``loss_smoothed`` and ``loss_nll``
  under the loss half of ``training.py``'s iteration (the numpy accumulators);
* ocr.py -- clovaai/CRAFT-pytorch's ``CRAFT`` with backtime92/CRAFT-Reimplementation's ``Maploss`` (per-image hard
  negative mining) under the loss half of ``trainic15data.py``'s iteration;
* vqa.py -- hengyuan-hu/bottom-up-attention-vqa's ``build_baseline0_newatt`` (GRU question embedding, ``NewAttention``,
  weight-normed ``FCNet``) under the loss half of ``train.py``'s ``train`` iteration;
* videotext.py -- ArrowLuo/CLIP4Clip's ``CLIP4Clip`` with the ``seqLSTM`` header and ``CrossEn`` under the loss half of
  ``train_epoch``'s iteration;
* helpers.py -- the shared utilities (seeding, a ``SummaryWriter`` stand-in, pytorch/examples' ``AverageMeter``,
  RepDistiller's ``accuracy``, numpy stand-ins for ``sklearn.metrics``' ROC-AUC / average precision,
  reid-strong-baseline's ``CrossEntropyLabelSmooth``, Ultra-Fast-Lane-Detection's ``SoftmaxFocalLoss``).

Each builder returns a fresh ``(model or function, inputs)``; every line where PyTorch 2.13
graph-breaks in these files carries ``# BREAK: ...`` (a source rewrite can keep outputs and
gradients) or ``# BREAK must-not: ...`` (none can).  ``python -m tests.corpus.fix_heldout18.check``
checks the marks and the hand-written ``reference_rewrites`` against PyTorch alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import (
    crowd,
    distill,
    enhancement,
    lane,
    linkpred,
    morph,
    nowcasting,
    ocr,
    protein,
    registration,
    reid,
    semiseg,
    tagging,
    videotext,
    vos,
    vqa,
)

if TYPE_CHECKING:
    from collections.abc import Callable

PROGRAMS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "waveunet_validation": enhancement.build_waveunet_validation,
    "shortchunk_validation": tagging.build_shortchunk_validation,
    "rpmnet_train_iteration": registration.build_rpmnet_train_iteration,
    "stcn_eval_davis": vos.build_stcn_eval_davis,
    "stcn_train_pass": vos.build_stcn_train_pass,
    "gae_epoch": linkpred.build_gae_epoch,
    "rkd_train_step": distill.build_rkd_train_step,
    "u2pl_train_step": semiseg.build_u2pl_train_step,
    "bayes_crowd_step": crowd.build_bayes_crowd_step,
    "ufld_train_step": lane.build_ufld_train_step,
    "reid_triplet_center": reid.build_reid_triplet_center,
    "reid_r1_map": reid.build_reid_r1_map,
    "voxelmorph_step": morph.build_voxelmorph_step,
    "convlstm_nowcasting": nowcasting.build_convlstm_nowcasting,
    "proteinmpnn_step": protein.build_proteinmpnn_step,
    "craft_train_iteration": ocr.build_craft_train_iteration,
    "vqa_train_iteration": vqa.build_vqa_train_iteration,
    "clip4clip_step": videotext.build_clip4clip_step,
}

__all__ = ["PROGRAMS"]

"""A seventeenth held-out set for ``dynscope.fix``, written without reading its rewrites.

Programs in the shapes real repositories have, from domains and repositories the earlier held-out sets do not
cover:

* captioning.py -- sgrvinod/a-PyTorch-Tutorial-to-Image-Captioning's Show, Attend and Tell: ``DecoderWithAttention``
  under ``train.py``'s ``validate`` iteration (``decode_lengths``, the shrinking ``batch_size_t``,
  ``pack_padded_sequence`` on the scores and targets, the top-5 ``accuracy`` meter) and ``caption.py``'s
  ``caption_image_beam_search``;
* trajectory.py -- agrimgupta92/sgan's ``TrajectoryGenerator`` (LSTM ``Encoder`` / ``Decoder``, ``PoolHiddenNet`` over
  each scene's ``seq_start_end`` bounds) under ``train.py``'s ``generator_step`` best-of-k variety loss, and
  ``evaluate_model.py``'s ``evaluate`` / ``evaluate_helper`` on a checkpoint's ``AttrDict`` arguments;
* kg.py -- TimDettmers/ConvE's ``ConvE`` under ``evaluation.py``'s filtered ``ranking_and_hits``;
* stereo.py -- xy-guo/GwcNet's ``train_sample`` (group-wise correlation volume, ``model_loss`` over the valid
  disparities, ``tensor2float``) and JiaRenChang/PSMNet's ``test`` on the basic concatenation-volume model;
* anomaly.py -- amazon-science/patchcore-inspection's ``PatchCore.fit`` / ``_predict`` (hooked feature aggregator,
  ``ApproximateGreedyCoresetSampler``, a numpy nearest-neighbour scorer, ``RescaleSegmentor``);
* matching.py -- zju3dv/LoFTR's coarse stage (``PositionEncodingSine``, linear-attention ``LocalFeatureTransformer``,
  dual-softmax ``CoarseMatching``) under ``LoFTRLoss``' coarse focal loss with its corner cases, on a yacs config;
* parsing.py -- yzhangcs/parser (SuPar)'s ``BiaffineDependencyModel`` ``loss`` / ``decode`` (``CoNLL.istree``,
  ``tarjan``) under ``BiaffineDependencyParser._evaluate`` for one batch;
* pathology.py -- mahmoodlab/CLAM's ``CLAM_SB`` with instance-level clustering under ``train_loop_clam`` for one slide
  (``Accuracy_Logger``, the running loss);
* timeseries.py -- ElementAI/N-BEATS' interpretable model, ``TimeseriesSampler`` and ``mase_loss`` under one iteration
  of ``experiments/trainer.py`` (gin-like bindings, the NaN stop, the step-decayed learning rate);
* style.py -- naoto0804/pytorch-AdaIN's ``Net`` and one iteration of ``train.py`` (``adjust_learning_rate``, the
  losses written to the ``SummaryWriter``);
* continual.py -- moskomule/ewc.pytorch's ``EWC`` (``deepcopy``'d means and Fisher accumulators, ``_diag_fisher``,
  ``penalty``) under the notebook's ``ewc_process`` at a new task;
* enhancement.py -- Li-Chongyi/Zero-DCE's ``enhance_net_nopool`` and non-reference losses under one iteration of
  ``lowlight_train.py``;
* neural_operator.py -- neuraloperator's original ``fourier_2d.py`` (``SpectralConv2d`` with complex weights, ``FNO2d``,
  ``UnitGaussianNormalizer``, ``LpLoss``) under one iteration of its Darcy training loop;
* flow.py -- ClementPinard/FlowNetPytorch's ``FlowNetS`` with ``multiscaleEPE`` / ``realEPE`` on sparse KITTI-like
  ground truth, under the loss half of ``main.py``'s ``train`` iteration (``AverageMeter``s, the writer);
* depth.py -- nianticlabs/monodepth2's stereo ``Trainer.process_batch`` (``BackprojectDepth`` / ``Project3D``,
  ``SSIM``, automasking, smoothness) and the logging step's ``compute_depth_losses``;
* ood.py -- pokaxpoka/deep_Mahalanobis_detector's ``sample_estimator`` (class means and the shared precision per
  layer, with a numpy ``EmpiricalCovariance``);
* helpers.py -- the shared utilities (seeding, a ``SummaryWriter`` stand-in, sgrvinod's ``AverageMeter`` /
  ``clip_gradient`` / ``accuracy``, GwcNet's ``make_iterative_func`` / ``make_nograd_func`` / ``tensor2float``, sgan's
  losses and ``relative_to_abs``); breaks sit in these helpers too (the captioning meter's top-k ``accuracy``,
  ``tensor2float`` for GwcNet's returned scalars).

Each builder returns a fresh ``(model or function, inputs)``; every line where PyTorch 2.13
graph-breaks in these files carries ``# BREAK: ...`` (a source rewrite can keep outputs and
gradients) or ``# BREAK must-not: ...`` (none can).  ``python -m tests.corpus.fix_heldout17.check``
checks the marks and the hand-written ``reference_rewrites`` against PyTorch alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import (
    anomaly,
    captioning,
    continual,
    depth,
    enhancement,
    flow,
    kg,
    matching,
    neural_operator,
    ood,
    parsing,
    pathology,
    stereo,
    style,
    timeseries,
    trajectory,
)

if TYPE_CHECKING:
    from collections.abc import Callable

PROGRAMS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "sat_validate": captioning.build_sat_validate,
    "sat_beam_search": captioning.build_sat_beam_search,
    "sgan_generator_step": trajectory.build_sgan_generator_step,
    "sgan_evaluate": trajectory.build_sgan_evaluate,
    "conve_ranking": kg.build_conve_ranking,
    "gwcnet_train": stereo.build_gwcnet_train,
    "psmnet_test": stereo.build_psmnet_test,
    "patchcore": anomaly.build_patchcore,
    "loftr_coarse_loss": matching.build_loftr_coarse_loss,
    "supar_evaluate": parsing.build_supar_evaluate,
    "clam_train_slide": pathology.build_clam_train_slide,
    "nbeats_train_iteration": timeseries.build_nbeats_train_iteration,
    "adain_train_iteration": style.build_adain_train_iteration,
    "ewc_process": continual.build_ewc_process,
    "zero_dce_train_iteration": enhancement.build_zero_dce_train_iteration,
    "fno_darcy_iteration": neural_operator.build_fno_darcy_iteration,
    "flownet_train_iteration": flow.build_flownet_train_iteration,
    "monodepth2_log_step": depth.build_monodepth2_log_step,
    "mahalanobis_estimator": ood.build_mahalanobis_estimator,
}

__all__ = ["PROGRAMS"]

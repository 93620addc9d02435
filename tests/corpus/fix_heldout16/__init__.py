"""A sixteenth held-out set for ``dynscope.fix``, written without reading its rewrites.

Programs in the shapes real repositories have, from domains and repositories the earlier held-out sets do not
cover:

* detection.py -- dbolya/yolact's ``Detect`` with ``cc_fast_nms`` and ``output_utils.postprocess``,
  biubug6/Pytorch_Retinaface's ``detect.py`` (``PriorBox``, the numpy threshold / top-k / ``py_cpu_nms``),
  WangYueFt/detr3d's ``NMSFreeCoder.decode_single`` under ``Detr3DHead.get_bboxes`` (the score threshold lowered
  until something passes, the post-centre range), lyuwenyu/RT-DETR's ``RTDETRPostProcessor`` with the COCO category
  remap and ``det_engine.evaluate``'s results keyed by image id, lufficc/SSD's ``MultiBoxLoss`` with
  ``hard_negative_mining`` on targets matched by amdegroot/ssd.pytorch's ``match``;
* diffusion.py -- openai/improved-diffusion's ``TrainLoop.forward_backward`` (``UniformSampler.sample`` through
  numpy, ``training_losses`` for a learned-range variance with ``_vb_terms_bpd``, ``_extract_into_tensor`` on the
  float64 numpy schedules, ``log_loss_dict``), huggingface/diffusers' (0.16) ``DDPMPipeline`` through
  ``DDPMScheduler.step`` / ``_get_variance`` (0-d timestep indexing, ``prev_t >= 0``, noise while ``t > 0``),
  lucidrains/denoising-diffusion-pytorch's ``ddim_sample`` (the times from ``linspace(...).int().tolist()``);
* decoding.py -- CompVis/stable-diffusion's ``PLMSSampler`` (``make_schedule`` mixing numpy and torch, classifier-free
  guidance, the pseudo improved Euler first step and the linear multistep updates), lmnt-com/diffwave's
  ``inference.predict`` with fast sampling (the aligned diffusion steps searched over numpy schedules), and
  jadore801120/attention-is-all-you-need-pytorch's ``Translator.translate_sentence`` beam search under
  ``translate.py``'s loop;
* metrics.py -- Lightning-AI/torchmetrics' ``MulticlassF1Score`` in an evaluation step (``torch.unique`` validation,
  ``ignore_index`` dropped by boolean indexing, ``_bincount``, ``_forward_reduce_state_update``), hszhao/semseg's
  PSPNet ``validate`` iteration (``intersectionAndUnionGPU``, numpy ``AverageMeter``s, ``loss.item()``);
* speaker.py -- speechbrain/speechbrain's VoxCeleb verification: ``compute_embedding`` through sentence
  ``InputNormalization`` and ``ECAPA_TDNN`` (the blocks called with ``lengths`` unless they raise ``TypeError``), and
  ``get_verification_scores`` writing the score file, then ``EER`` (``torch.unique`` thresholds, float results);
* optim.py -- cybertronai/pytorch-lamb's ``Lamb.step`` (the trust ratio's zero-norm fallback) in ``test_lamb.py``'s
  training iteration (``zero_grad``, ``backward``, ``log_lamb_rs``, the loss written to the event writer);
* pointcloud.py -- CVMI-Lab/PAConv's scene-segmentation iteration on WangYueFt/dgcnn's ``DGCNN_semseg``
  (``intersectionAndUnionGPU`` on the point labels, ``loss.item()`` into the meter);
* rl.py -- suragnair/alpha-zero-general's ``NNetWrapper.train`` batch for Othello (the drawn examples gathered from the
  history list, ``loss_pi`` / ``loss_v``, the ``AverageMeter``s fed with ``.item()``);
* attention.py -- lucidrains/performer-pytorch's ``PerformerLM`` (FAVOR+ ``FastAttention``) and its
  ``ProjectionUpdater`` redrawing the projections when the ``calls_since_last_redraw`` buffer reaches the interval;
* vision.py -- facebookresearch/ConvNeXt's ``train_one_epoch`` iteration (numpy lr / wd schedules, ``loss.item()``
  checked with ``math.isfinite``, the class accuracy into ``MetricLogger`` and ``TensorboardLogger``);
* helpers.py -- the shared utilities (seeding, ConvNeXt's ``MetricLogger`` / ``SmoothedValue`` / ``TensorboardLogger``,
  pytorch/examples' ``AverageMeter``, hszhao/semseg's ``intersectionAndUnionGPU``, the SSD box utilities that
  Pytorch_Retinaface, YOLACT and ssd.pytorch share); several breaks sit in these helpers, reached from other files
  (``intersectionAndUnionGPU`` from metrics.py and pointcloud.py, the loggers from vision.py).

Each builder returns a fresh ``(model or function, inputs)``; every line where PyTorch 2.13
graph-breaks in these files carries ``# BREAK: ...`` (a source rewrite can keep outputs and
gradients) or ``# BREAK must-not: ...`` (none can).  ``python -m tests.corpus.fix_heldout16.check``
checks the marks and the hand-written ``reference_rewrites`` against PyTorch alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import attention, decoding, detection, diffusion, metrics, optim, pointcloud, rl, speaker, vision

if TYPE_CHECKING:
    from collections.abc import Callable

PROGRAMS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "yolact_detect": detection.build_yolact_detect,
    "retinaface_detect": detection.build_retinaface_detect,
    "detr3d_decode": detection.build_detr3d_decode,
    "rtdetr_evaluate": detection.build_rtdetr_evaluate,
    "ssd_multibox_loss": detection.build_ssd_multibox_loss,
    "improved_diffusion_train": diffusion.build_improved_diffusion_train,
    "diffusers_ddpm": diffusion.build_diffusers_ddpm,
    "lucidrains_ddim": diffusion.build_lucidrains_ddim,
    "plms_txt2img": decoding.build_plms_txt2img,
    "diffwave_predict": decoding.build_diffwave_predict,
    "aiayn_translate": decoding.build_aiayn_translate,
    "torchmetrics_f1": metrics.build_torchmetrics_f1,
    "semseg_validate": metrics.build_semseg_validate,
    "speechbrain_embedding": speaker.build_speechbrain_embedding,
    "speechbrain_eer": speaker.build_speechbrain_eer,
    "lamb_train_step": optim.build_lamb_train_step,
    "paconv_dgcnn_train": pointcloud.build_paconv_dgcnn_train,
    "alphazero_train": rl.build_alphazero_train,
    "performer_lm": attention.build_performer_lm,
    "convnext_train_step": vision.build_convnext_train_step,
}

__all__ = ["PROGRAMS"]

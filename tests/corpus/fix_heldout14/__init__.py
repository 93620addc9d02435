"""A fourteenth held-out set for ``dynscope.fix``, written without reading its rewrites.

Programs in the shapes real repositories have, from domains and repositories the earlier held-out sets do not
cover:

* video.py -- open-mmlab/mmaction2's TSM recognizer (``TemporalShift`` around each block's first conv,
  ``TSMHead``'s average consensus, ``Recognizer2D.forward_train`` / ``train_step``), facebookresearch/SlowFast's
  multi-view testing (a two-pathway ``SlowFast`` with ``FuseFastToSlow``, the ``TestMeter`` summing each video's clip
  predictions and ``finalize_metrics``), facebookresearch/TimeSformer's divided space-time ``VisionTransformer``
  under SlowFast's ``train_epoch`` step (``check_nan_losses``, the errors copied to the ``TrainMeter``);
* audio.py -- mmaction2's audio recognizer (``ResNetAudio``, ``AudioTSNHead``) sharing the video recognizers'
  ``BaseHead.loss`` and ``_parse_losses``, NVIDIA/waveglow's training step (``Invertible1x1Conv`` flows, weight-normed
  ``WN`` couplings through the TorchScript ``fused_add_tanh_sigmoid_multiply`` with an ``IntTensor`` channel count,
  ``WaveGlowLoss``, the loss read back and printed);
* ocr.py -- MhLiao/DB's ``SegDetectorModel`` with ``L1BalanceCELoss`` (hard negatives counted with ``int()``,
  ``MaskL1Loss``'s ``.item() == 0`` case, ``DiceLoss``), baudm/parseq's ``PARSeq.training_step`` (permutations from
  numpy's ``Generator``, ``generate_attn_masks`` indexed by 0-d tensors, the loss weighted by ``.item()`` counts);
* timeseries.py -- zhykoties/TimeSeries' DeepAR training window (an ``nn.LSTM`` fed one step at a time, missing
  inputs replaced by the previous mu, the likelihood over the observed labels by boolean indexing),
  thuml/Time-Series-Library's TimesNet (``FFT_for_Period`` through numpy, the period-folded 2-D inception blocks,
  the experiment's ``loss.item()`` list);
* tabular.py -- somepago/saint's supervised step (``embed_data_mask`` writing the mask embeddings in by boolean
  indexing, the column-attention transformer, the CLS head);
* rl.py -- ikostrikov/pytorch-a2c-ppo-acktr-gail's GAIL discriminator (``VecNormalize``'s numpy filter on the
  expert states, ``compute_grad_pen`` through ``requires_grad = True`` and ``autograd.grad``, ``predict_reward``
  with baselines' numpy ``RunningMeanStd``);
* diffusion.py -- LuChengTHU/dpm-solver's ``DPM_Solver`` (multistep DPM-Solver++ with classifier guidance through
  ``autograd.grad``; the adaptive step-size solver's host loop), luosiallen/latent-consistency-model's pipeline loop
  (``LCMScheduler.step`` indexing ``alphas_cumprod`` by 0-d timesteps, ``get_w_embedding``);
* llm.py -- NVIDIA/Megatron-LM's GPT ``forward_step`` on one rank (``get_ltor_masks_and_position_ids`` resetting
  attention and positions after each EOD of packed documents, ``_VocabParallelCrossEntropy``, ``loss_func``'s NaN
  assert);
* metric.py -- deepinsight/insightface's arcface_torch step (``PartialFC_V2``'s in-place label bookkeeping,
  ``ArcFace`` with its ``easy_margin`` switch at ``torch.where(labels != -1)``);
* compression.py -- hustzxd/LSQuantization's ``Conv2dLSQ`` / ``LinearLSQ`` / ``ActLSQ`` (step sizes initialised
  from the first batch behind an ``init_state`` buffer), huggingface/transformers' movement pruning (emmental's
  ``MaskedLinear`` and ``ThresholdBinarizer``, ``masked_run_glue.py``'s global top-k threshold read back with
  ``.item()``);
* scene.py -- facebookresearch/pytorch3d's ``iterative_closest_point`` with ``corresponding_points_alignment``
  (value checks, padding masks, the degenerate-cloud warning, the convergence test), Totoro97/NeuS' training
  iteration (``up_sample`` / ``cat_z_vals``, ``SDFNetwork.gradient`` by ``autograd.grad``, the periodic report);
* vision.py -- PeizeSun/OneNet's training forward (the ``MinCostMatcher``, ``SetCriterion`` with fvcore's
  ``sigmoid_focal_loss_jit`` on targets built through ``torch.nonzero``, the box count read back with ``.item()``);
* helpers.py -- the shared utilities (seeding, mmaction2's ``top_k_accuracy``, ``BaseHead.loss`` and
  ``_parse_losses``, SlowFast's ``check_nan_losses`` and ``topks_correct``, detr's ``box_ops``); several breaks sit in
  these helpers, reached from other files (the recognizers' numpy top-k and float log both from video.py and from
  audio.py).

Each builder returns a fresh ``(model or function, inputs)``; every line where PyTorch 2.13
graph-breaks in these files carries ``# BREAK: ...`` (a source rewrite can keep outputs and
gradients) or ``# BREAK must-not: ...`` (none can).  ``python -m tests.corpus.fix_heldout14.check``
checks the marks and the hand-written ``reference_rewrites`` against PyTorch alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import audio, compression, diffusion, llm, metric, ocr, rl, scene, tabular, timeseries, video, vision

if TYPE_CHECKING:
    from collections.abc import Callable

PROGRAMS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "tsm_train": video.build_tsm_train,
    "slowfast_test": video.build_slowfast_test,
    "timesformer_train": video.build_timesformer_train,
    "audio_recognizer": audio.build_audio_recognizer,
    "waveglow_step": audio.build_waveglow_step,
    "dbnet_loss": ocr.build_dbnet_loss,
    "parseq_train": ocr.build_parseq_train,
    "deepar_train": timeseries.build_deepar_train,
    "timesnet_train": timeseries.build_timesnet_train,
    "saint_train": tabular.build_saint_train,
    "gail_update": rl.build_gail_update,
    "dpm_solver_guided": diffusion.build_dpm_solver_guided,
    "dpm_solver_adaptive": diffusion.build_dpm_solver_adaptive,
    "lcm_sample": diffusion.build_lcm_sample,
    "megatron_gpt_step": llm.build_megatron_gpt_step,
    "partial_fc_arcface": metric.build_partial_fc_arcface,
    "lsq_qat": compression.build_lsq_qat,
    "movement_pruning": compression.build_movement_pruning,
    "pytorch3d_icp": scene.build_pytorch3d_icp,
    "neus_train": scene.build_neus_train,
    "onenet_loss": vision.build_onenet_loss,
}

__all__ = ["PROGRAMS"]

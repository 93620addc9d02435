"""An eleventh held-out set for ``dynscope.fix``, written without reading its rewrites.

Programs in the shapes real repositories have, from domains the first ten held-out sets do not cover:

* sequence.py -- Mamba's reference selective scan (state-spaces/mamba ``selective_scan_ref``) over sequences
  packed into one row by ``cu_seqlens``, Hugging Face Longformer's global attention (mask values 0 / 1 / 2,
  ``_get_global_attn_indices``) in a dense-band form, lucidrains/electra-pytorch's replaced-token-detection
  step (gumbel-sampled generator tokens, nonzero-indexed BCE, accuracies), bentrevett/pytorch-seq2seq's
  attention seq2seq with a teacher-forcing coin per step;
* selfsup.py -- facebookresearch/dino's ``MultiCropWrapper`` and ``DINOLoss`` (teacher-temperature schedule,
  centre EMA, the non-finite-loss exit), lucidrains/byol-pytorch with its ``@singleton`` lazily deep-copied
  target encoder, TorchSSL's FlexMatch class-wise thresholds (``Counter`` over the selected labels),
  bhanml/Co-teaching's small-loss exchange with a numpy forget-rate schedule, YU1ut/MixMatch-pytorch's
  sharpen / mixup / interleave step;
* generative.py -- junyanz/pytorch-CycleGAN-and-pix2pix's ``ImagePool`` feeding the discriminator, audiocraft's
  ``ResidualVectorQuantizer`` with quantizer dropout and a codebook-usage perplexity, dome272/MaskGIT-pytorch's
  masked-token training step with its cosine ``gamma`` schedule;
* points.py -- yanx27/Pointnet_Pointnet2_pytorch's SSG classifier (farthest point sampling, ball query), a
  voxel segmentation net with torchsparse-style ``sparse_quantize`` and scatter-mean pooling, EquiBind's
  ``rigid_transform_Kabsch_3D_torch`` aligning predicted conformers for an RMSD loss;
* rl.py -- an R2D2 learner (burn-in, value rescaling, n-step double Q, priorities written back to a Python
  replay), oxwhirl/pymarl's QMIX ``QLearner`` over a padded episode batch with its stats logger;
* graphs.py -- OGB's GIN with a virtual node (``GNN_node_Virtualnode``) over a PyG-style batch;
* helpers.py -- the shared utilities (seeding, an MLP, a masked mean, PyG-style ``scatter_sum`` /
  ``scatter_mean``, PointNet++'s ``farthest_point_sample`` / ``query_ball_point``, a pymarl-style
  ``StatsLogger``); several breaks sit in these helpers, reached from other files.

Each builder returns a fresh ``(model or function, inputs)``; every line where PyTorch 2.13
graph-breaks in these files carries ``# BREAK: ...`` (a source rewrite can keep outputs and
gradients) or ``# BREAK must-not: ...`` (none can).  ``python -m tests.corpus.fix_heldout11.check``
checks the marks and the hand-written ``reference_rewrites`` against PyTorch alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import generative, graphs, points, rl, selfsup, sequence

if TYPE_CHECKING:
    from collections.abc import Callable

PROGRAMS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "mamba_varlen": sequence.build_mamba_varlen,
    "longformer_global": sequence.build_longformer_global,
    "electra_pretrain": sequence.build_electra_pretrain,
    "seq2seq_attention": sequence.build_seq2seq_attention,
    "dino_multicrop": selfsup.build_dino_multicrop,
    "byol_lazy_target": selfsup.build_byol_lazy_target,
    "flexmatch_thresholds": selfsup.build_flexmatch_thresholds,
    "coteaching": selfsup.build_coteaching,
    "mixmatch": selfsup.build_mixmatch,
    "cyclegan_pool": generative.build_cyclegan_pool,
    "encodec_rvq": generative.build_encodec_rvq,
    "maskgit_train": generative.build_maskgit_train,
    "pointnet2_ssg": points.build_pointnet2_ssg,
    "voxel_seg": points.build_voxel_seg,
    "kabsch_rmsd": points.build_kabsch_rmsd,
    "r2d2_burnin": rl.build_r2d2_burnin,
    "qmix_learner": rl.build_qmix_learner,
    "gin_virtualnode": graphs.build_gin_virtualnode,
}

__all__ = ["PROGRAMS"]

"""An eighth held-out set for ``dynscope.fix``, written without reading its rewrites.

Programs in the shapes real repositories have, from domains the first seven held-out sets do not
cover: a FastSpeech 2 length regulator and its masked losses, Tacotron 2's gate-stopped decoder, an
RNN-T greedy search, an espnet2 CTC model, GPT-2-era top-k/top-p sampling, packed-document attention
with a varlen fallback, PABEE patience-based early exit, mixture-of-depths routing, mmdet's ATSS
assigner, YOLOX's SimOTA matching, MaskFormer's panoptic merge, a keypoint head trained on COCO's OKS,
a TRL-style RLHF PPO step with an adaptive KL controller, Rainbow's C51 projection, a policy trained
through a batched pendulum rollout with auto-reset, GraphSAGE on PyG's k-hop subgraph, a
Lennard-Jones force field with a switched cutoff, exact GP regression with ``psd_safe_cholesky``, PID
gains tuned through a closed loop with anti-windup, two-tower retrieval with deduplicated in-batch
negatives, DIN's target attention, SimCLR's NT-Xent with false negatives removed, Dynamic Weight
Average multi-task training with an epoch log, a float16 T5 stack with its inf clamping, Glow's
data-initialised ActNorm, and NeRF hierarchical volume rendering.

Each builder returns a fresh ``(model or function, inputs)``; every line where PyTorch 2.13
graph-breaks in these files carries ``# BREAK: ...`` (a source rewrite can keep outputs and
gradients) or ``# BREAK must-not: ...`` (none can).  ``python -m tests.corpus.fix_heldout8.check``
checks the marks and the hand-written ``reference_rewrites`` against PyTorch alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import generative, graph, nlp, recsys, rl, science, speech, training, vision

if TYPE_CHECKING:
    from collections.abc import Callable

PROGRAMS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "fastspeech_lr": speech.build_fastspeech_lr,
    "tacotron_stop": speech.build_tacotron_stop,
    "rnnt_greedy": speech.build_rnnt_greedy,
    "ctc_espnet": speech.build_ctc_espnet,
    "top_p_sampling": nlp.build_top_p_sampling,
    "packed_docs": nlp.build_packed_docs,
    "pabee_exit": nlp.build_pabee_exit,
    "mod_routing": nlp.build_mod_routing,
    "atss_assign": vision.build_atss_assign,
    "simota_assign": vision.build_simota_assign,
    "panoptic_merge": vision.build_panoptic_merge,
    "oks_keypoints": vision.build_oks_keypoints,
    "rlhf_rewards": rl.build_rlhf_rewards,
    "c51_projection": rl.build_c51_projection,
    "pendulum_rollout": rl.build_pendulum_rollout,
    "khop_sage": graph.build_khop_sage,
    "lj_cutoff": science.build_lj_cutoff,
    "gp_jitter": science.build_gp_jitter,
    "pid_autotune": science.build_pid_autotune,
    "two_tower": recsys.build_two_tower,
    "din_history": recsys.build_din_history,
    "simclr_ntxent": recsys.build_simclr_ntxent,
    "dwa_multitask": training.build_dwa_multitask,
    "t5_fp16": training.build_t5_fp16,
    "glow_actnorm": generative.build_glow_actnorm,
    "nerf_render": generative.build_nerf_render,
}

__all__ = ["PROGRAMS"]

"""A held-out set for ``dynscope.fix``: programs written in the shapes real repositories have.

Each builder returns a fresh ``(model, inputs)``; every line where PyTorch 2.13 graph-breaks
in these files carries ``# BREAK: ...`` (a source rewrite can keep outputs and gradients) or
``# BREAK must-not: ...`` (none can).  ``python -m tests.corpus.fix_heldout.check`` checks the
marks against PyTorch alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import detection, hf_style, preprocess, rollouts, training

if TYPE_CHECKING:
    from collections.abc import Callable

PROGRAMS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "llama_attention": hf_style.build_llama_attention,
    "sentence_encoder": hf_style.build_sentence_encoder,
    "mixtral_moe": hf_style.build_mixtral_moe,
    "greedy_generate": hf_style.build_greedy_generate,
    "beam_search": hf_style.build_beam_search,
    "nanogpt_train_step": training.build_nanogpt_train_step,
    "eval_metrics": training.build_eval_metrics,
    "wgan_gp": training.build_wgan_gp,
    "ema_teacher": training.build_ema_teacher,
    "retinanet_postprocess": detection.build_retinanet_postprocess,
    "centernet_decode": detection.build_centernet_decode,
    "per_class_nms": detection.build_per_class_nms,
    "a2c_episode": rollouts.build_a2c_episode,
    "ppo_loss": rollouts.build_ppo_loss,
    "episode_stats": rollouts.build_episode_stats,
    "logmel_frontend": preprocess.build_logmel_frontend,
    "ragged_tokens": preprocess.build_ragged_tokens,
    "tabular_scaler": preprocess.build_tabular_scaler,
}

__all__ = ["PROGRAMS"]

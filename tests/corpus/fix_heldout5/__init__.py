"""A fifth held-out set for ``dynscope.fix``, written without reading its rewrites.

Programs in the shapes real repositories have, from domains the first four held-out sets do not
cover: a RealNVP flow with an invertibility check, a neural ODE with a capped Euler step, a
tracker's greedy IoU matching, a motion-aware video clip sampler, a scale-invariant depth loss,
voxel occupancy, a Cox survival loss over risk sets, BRITS-style time-series imputation,
padding-aware protein pooling, an MMR diversity re-ranker, a kNN retrieval memory, a learned-rate
update rule, a cosine weight-decay schedule, an EMA teacher with centring, quantile clipping of
activations, stochastic depth, a MIDI event language model, no-repeat-n-gram greedy decoding,
mixture-of-depths token dropping, a pairwise reward model, bouncing particles.

Each builder returns a fresh ``(model or function, inputs)``; every line where PyTorch 2.13
graph-breaks in these files carries ``# BREAK: ...`` (a source rewrite can keep outputs and
gradients) or ``# BREAK must-not: ...`` (none can).  ``python -m tests.corpus.fix_heldout5.check``
checks the marks and the hand-written ``reference_rewrites`` against PyTorch alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import flows, health, perception, physics, recsys, sequence, training

if TYPE_CHECKING:
    from collections.abc import Callable

PROGRAMS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "realnvp_invert": flows.build_realnvp_invert,
    "ode_capped_euler": flows.build_ode_capped_euler,
    "iou_tracker": perception.build_iou_tracker,
    "clip_sampler": perception.build_clip_sampler,
    "depth_silog": perception.build_depth_silog,
    "voxel_occupancy": perception.build_voxel_occupancy,
    "cox_loss": health.build_cox_loss,
    "ts_impute": health.build_ts_impute,
    "protein_pool": health.build_protein_pool,
    "diverse_rerank": recsys.build_diverse_rerank,
    "retrieval_memory": recsys.build_retrieval_memory,
    "learned_lr": training.build_learned_lr,
    "wd_schedule": training.build_wd_schedule,
    "ema_teacher": training.build_ema_teacher,
    "quantile_clip": training.build_quantile_clip,
    "stochastic_depth": training.build_stochastic_depth,
    "midi_lm": sequence.build_midi_lm,
    "ngram_block": sequence.build_ngram_block,
    "token_drop": sequence.build_token_drop,
    "reward_pairwise": sequence.build_reward_pairwise,
    "particle_bounce": physics.build_particle_bounce,
}

__all__ = ["PROGRAMS"]

"""A thirteenth held-out set for ``dynscope.fix``, written without reading its rewrites.

Programs in the shapes real repositories have, from domains and repositories the earlier held-out sets do not
cover:

* rl.py -- DLR-RM/stable-baselines3's ``PPO.train`` over its numpy ``RolloutBuffer`` (GAE in
  ``compute_returns_and_advantage``, minibatches from the ``get`` generator over a numpy permutation, the linear
  clip-range schedule, ``.item()`` logging, the ``target_kl`` early stop, ``explained_variance`` in numpy);
* detection.py -- tianweiy/CenterPoint's ``CenterHead`` losses on a PointPillars-style BEV map (``FastFocalLoss``
  divided by the object count unless there is none, ``RegLoss`` on the gathered box regressions, the per-task losses
  merged key by key), with targets drawn as det3d's ``AssignLabel`` does;
* segmentation.py -- open-mmlab/mmsegmentation's decode-head ``losses`` with the ``OHEMPixelSampler`` (kept-pixel
  threshold from the sorted true-class probabilities), CoinCheung/BiSeNet's ``OhemCELoss`` on BiSeNetV2's main and
  auxiliary heads, bermanmaxim/LovaszSoftmax's ``lovasz_softmax`` (ignored pixels dropped in ``flatten_probas``,
  one Lovasz extension per class present);
* generative.py -- CompVis/taming-transformers' VQGAN training step (``VectorQuantizer``,
  ``VQLPIPSWithDiscriminator.calculate_adaptive_weight`` by ``autograd.grad`` at the decoder's last layer,
  ``adopt_weight``), NVlabs/stylegan2-ada-pytorch's lazy regularization (``Greg``: style mixing with a tensor
  cutoff, the path-length penalty and its ``pl_mean`` EMA; ``Dreg``: R1 on the augmented reals) and the training
  loop's ADA augment-probability update from the ``training_stats`` ``Collector``, openai/consistency_models'
  consistency training (``create_ema_and_scales_fn``'s numpy ``N(k)`` schedule, the dropout RNG state replayed for
  the target network in ``consistency_losses``, the target EMA update);
* language.py -- microsoft/DeepSpeed's ``MoE`` with ``top1gating`` (the TorchScript ``_capacity``, ``_top_idx``,
  ``exp_counts`` on the host, einsum dispatch and combine), BlinkDL/RWKV-LM's RWKV-4 RNN mode
  generating through ``sample_logits``' numpy top-p sampling, a huggingface/peft LoRA adapter over
  bitsandbytes-foundation/bitsandbytes' ``Linear8bitLt`` (``MatMul8bitLt`` with the LLM.int8 outlier columns of
  ``int8_vectorwise_quant`` / ``int8_mixed_scaled_mm`` in their PyTorch form), mit-han-lab/streaming-llm's
  ``streaming_inference`` (``StartRecentKVCache`` evicting all but the attention sinks and the recent entries,
  ``greedy_generate`` streaming decoded words, position-shifted Llama attention with its rotary cache regrown);
* metric.py -- orobix/Prototypical-Networks-for-Few-shot-Learning-PyTorch's ``prototypical_loss`` (``torch.unique``
  of the targets, per-class ``nonzero`` support and query indices, ``.item()`` for the query count) on its
  ``ProtoNet``;
* audio.py -- hitachi-speech/EEND's PyTorch backend: the self-attentive ``TransformerModel``, ``batch_pit_loss``
  (the best speaker permutation's labels picked from a Python list by a tensor index) and
  ``report_diarization_error``'s statistics summed as Python floats; facebookresearch/demucs' ``train_model`` step
  (the ``augment`` chain with ``Scale`` gated by Python's ``random``, the waveform ``Demucs`` with ``center_trim``,
  the L1 loss's running mean read back for tqdm);
* recsys.py -- jaywonchung/BERT4Rec-VAE-Pytorch's ``BERTModel`` under ``BERTTrainer``: the cloze loss and
  ``recalls_and_ndcgs_for_ks`` (metrics read back with ``.item()``, the ideal DCG built row by row with ``int(n)``);
* scene.py -- nerfstudio-project/nerfacc's ``OccGridEstimator.update_every_n_steps`` (Instant-NGP's occupancy grid:
  uniform plus randomly chosen occupied cells, the EMA of the density, the threshold from the mean occupancy);
* helpers.py -- the shared utilities (seeding, an MLP, stable-baselines3's ``explained_variance``, det3d's
  ``example_to_device``, stylegan2-ada-pytorch's ``training_stats``, demucs' ``augment`` modules); several breaks
  sit in these helpers, reached from other files.

Each builder returns a fresh ``(model or function, inputs)``; every line where PyTorch 2.13
graph-breaks in these files carries ``# BREAK: ...`` (a source rewrite can keep outputs and
gradients) or ``# BREAK must-not: ...`` (none can).  ``python -m tests.corpus.fix_heldout13.check``
checks the marks and the hand-written ``reference_rewrites`` against PyTorch alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import audio, detection, generative, language, metric, recsys, rl, scene, segmentation

if TYPE_CHECKING:
    from collections.abc import Callable

PROGRAMS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "ppo_sb3_train": rl.build_ppo_sb3_train,
    "centerpoint_head": detection.build_centerpoint_head,
    "mmseg_ohem": segmentation.build_mmseg_ohem,
    "bisenet_ohem": segmentation.build_bisenet_ohem,
    "lovasz_softmax": segmentation.build_lovasz_softmax,
    "vqgan_adaptive_weight": generative.build_vqgan_adaptive_weight,
    "stylegan2_greg": generative.build_stylegan2_greg,
    "stylegan2_dreg": generative.build_stylegan2_dreg,
    "stylegan2_ada": generative.build_stylegan2_ada,
    "consistency_training": generative.build_consistency_training,
    "deepspeed_moe": language.build_deepspeed_moe,
    "rwkv_generate": language.build_rwkv_generate,
    "llm_int8_lora": language.build_llm_int8_lora,
    "streaming_llm": language.build_streaming_llm,
    "protonet_loss": metric.build_protonet_loss,
    "eend_pit": audio.build_eend_pit,
    "demucs_step": audio.build_demucs_step,
    "bert4rec": recsys.build_bert4rec,
    "ngp_occupancy": scene.build_ngp_occupancy,
}

__all__ = ["PROGRAMS"]

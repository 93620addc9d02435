"""How many break sites does dynscope.fix remove in programs written apart from its rewrites?

Runs dynscope.fix on every program of the held-out sets, each written by someone who had not
read the rewrites or their corpus, in the shapes real repositories have, whose break lines are
marked fixable or must-not:

- tests/corpus/fix_heldout: HF-style forwards, training loops, detection post-processing, RL
  rollouts, pre-processing, MoE routing, decoding, helpers in other files. The rewrites in
  fix/checks.py, the where over a branch's own temporary and the `.tolist()` unpacking were
  written after reading dynscope's output on this set: its figure is no longer unseen.
- tests/corpus/fix_heldout2: written after those: diffusion schedulers, T5 position bias, CTC
  decoding, CLIP and triplet losses, distillation, GNN layers, a tree RNN, DLRM embedding
  bags, a VAE, a mixture density head, a Kalman filter, an autoregressive forecaster,
  segmentation post-processing, MAE patches, loss scaling, label smoothing, curriculum
  sampling. Measured unseen once (9 of 31 fixable sites removed); the f-string assert, the
  `is not None and` split, bincount and the count kept a tensor were written after reading
  dynscope's output on it.
- tests/corpus/fix_heldout3: written after those: BERT masking, dynamic truncation, a CRF, NTK
  RoPE, top-k attention, speculative decoding, YOLO targets, a DETR set loss, PointNet
  sampling, a focal loss, spectral norm, gradient reversal, Gumbel annealing, mixup, early
  exits, quantization observers, pruning, prioritized DQN, a MoCo queue, tabular unknowns,
  KG negative sampling, SpecAugment. Measured unseen once (13 of 32 fixable sites removed);
  the report-then-assign check and the per-element loop were written after reading
  dynscope's output on it.
- tests/corpus/fix_heldout4: written after those, unseen by every rewrite: a Gram style
  loss, super-resolution PSNR, ToMe merging, an audio contrastive head, ASR length
  normalisation, a popularity bias, LambdaRank, a NeRF sampler, a PINN boundary loss, NaN
  weather targets, a Hopfield layer, capsule routing, uncertainty multi-task weights, a sparse
  autoencoder's resampling, an anomaly threshold, ALiBi slopes, scheduled sampling, an OCR
  blank guard. Measured unseen once (11 of 21 fixable sites removed).
- tests/corpus/fix_heldout5: written after those: a RealNVP flow, a capped Euler ODE step, an
  IoU tracker, a clip sampler, a scale-invariant depth loss, voxel occupancy, a Cox loss,
  time-series imputation, protein pooling, a diversity re-ranker, a retrieval memory, a learned
  learning rate, a weight-decay schedule, an EMA teacher, quantile clipping, stochastic depth,
  a MIDI LM, n-gram blocking, token dropping, a pairwise reward model, bouncing particles.
  Measured unseen once (7 of 31 fixable sites removed, with fix/masks.py, written from sets
  2-4, in place); fix/numbers.py, the count guard, the conditional expression, float() of a
  call and the in-place lengths were written after reading dynscope's output on it.
- tests/corpus/fix_heldout6: written after those: AAM-softmax speaker verification, voice
  activity pooling, ECG R-peaks, a chunked SSM scan, a chamfer loss, optical-flow warping,
  pose heatmaps, weather patches with NaN guards, Sinkhorn matching, VQ dead-code reset, a
  metric-learning miner, top-k graph pooling, CTR calibration, a lazily built tabular
  normaliser, FedAvg with clipping, MC dropout, a curriculum percentile, a WGAN clip, FGSM in
  forward, LoRA warm-up, temperature annealing, a length penalty, a data-sized attention window,
  KV-cache eviction; helpers in another file called from several programs. Measured unseen
  once (14 of 34 fixable sites removed); the early return, state updates under a test, int()
  of a step into math, rows set over numbers read back were written after reading it.
- tests/corpus/fix_heldout7: written after those: FPN RoI routing, CenterNet decoding, loudness
  normalisation, YIN pitch, onset detection, an HF-style encoder's padding check, SQuAD span
  search, a repetition penalty, SASRec, id remapping, PPO's GAE, a CartPole rollout, SAC's
  temperature, a SchNet radius graph, an adaptive Runge-Kutta ODE, RevIN, GAT, DDIM with
  guidance, a Karras Heun sampler, an EMA copy in forward, skipping non-finite losses, Dice with
  an ignore label, binned ECE, AUROC; helpers in another file called from several programs.
  Measured unseen once (7 of 35 fixable sites removed); the plain-object scheduler swap, the
  rows written back for a nonzero index and the shortcuts were written after reading it.
- tests/corpus/fix_heldout8: written after those: a FastSpeech 2 step, Tacotron's gate stop,
  RNN-T greedy search, an espnet CTC model, top-p sampling, packed documents, PABEE early exit,
  mixture-of-depths routing, ATSS and SimOTA assignment, panoptic merging, an OKS keypoint loss,
  TRL's RLHF rewards, C51's projection, a pendulum rollout with resets, GraphSAGE on a k-hop
  subgraph, a Lennard-Jones cutoff, GP jitter retries, PID tuning, a two-tower retriever, DIN,
  SimCLR, DWA multi-task weights, T5 in fp16, Glow's ActNorm, NeRF rendering. Measured unseen
  once (11 of 45 fixable sites removed, with the shortcuts, the plain-object swap and the rows
  written back in place); the dtype test kept Python's, the body run always, the boolean rows
  written back, the last nonzero as argmax and the sorted mask scattered back were written
  after reading it.
- tests/corpus/fix_heldout9: written after those: wav2vec 2.0's CTC head with SpecAugment and
  LayerDrop, Whisper's timestamp rules, SepFormer's PIT loss, Mixtral's routing, LLaVA's merge,
  MosaicBERT's unpadding, ColBERT's skiplist, a kNN-LM, MEGABYTE sampling, RetinaNet's loss and
  post-processing, SAM's point prompts, two-stage Deformable DETR, MONAI's sliding window,
  Grounding DINO's text masks, a Decision Transformer step, an OGB molecule step, GraphGPS,
  PyG's grid sampling, RotatE, OpenFold-style recycling, Gaussian splatting, Autoformer,
  an anomaly threshold, TabNet's batch log, LLaDA sampling. Measured unseen once (10 of 54
  fixable sites removed, with every rewrite above in place); the CTC targets padded, the max
  of two selections, the length mask over row indices were written after reading it.
- tests/corpus/fix_heldout10: written after those: DPO, GRPO and KTO losses, Medusa's acceptance,
  Switch Transformers' capacity routing, paged attention, gradient accumulation, DCN-v2 on jagged
  features, a two-tower logQ correction, LightGCN's evaluation, YOLOv8's assigner and loss,
  Mask2Former's point sampling, ByteTrack, PointPillars, VideoMAE, nnU-Net's deep supervision,
  HuBERT, HiFi-GAN, VITS' alignment search, MuZero, IMPALA, EDM with EGNN, ESM's contact head, a
  neural ODE, GraphCast, DiffPool. Measured unseen once (13 of 62 fixable sites removed, 2
  verified at must-not sites: guarded prints the run never reached); the guard verified only
  where the report ran, the loop over lengths, the conditional's split test and the assert's
  constant message were written after reading it; so were a selection's group followed through
  the file's helpers, an `if` on a setting and a write back through the mask (YOLOv8's box and
  DFL losses), and one-hot labels of a selection (after reading set 7's Dice loss again).
- tests/corpus/fix_heldout11: written after those: Mamba's scan over packed sequences, Longformer's
  global attention, ELECTRA, DINO's multi-crop loss, BYOL, FlexMatch, Co-teaching, MixMatch, CycleGAN's
  image pool, EnCodec's residual quantizer, MaskGIT, PointNet++, voxel segmentation, Kabsch alignment,
  R2D2, QMIX, GIN with a virtual node. Measured unseen once (6 of 25 fixable sites removed, 2 verified
  at must-not sites: QMIX's logged loss guarded, and its logger's record under WARNING); what objects
  of the program's own classes keep, a comparison of selections, a nonzero index tuple as its mask, a
  trim inside a comprehension and a write through an index a mask picked were written after reading it.
- tests/corpus/fix_heldout12: written after those: Informer's ProbSparse attention, Autoformer's
  auto-correlation, wav2vec 2.0 pre-training, HuBERT's masked prediction, a CRNN/CTC OCR step, TabNet,
  Switch Transformers' capacity routing, TRL's DPO with flush_left, FCOS's loss, Mask2Former's criterion,
  SAM's prompt encoder, Gaussian splatting's statistics and densification, a Decision Transformer step,
  DER++ with a reservoir buffer, MAML's inner loop, GDAS, a graph transformer with Laplacian encodings.
  Measured unseen once (9 of 30 fixable sites removed); the nested function verified over copies of
  what it closes over, the one-hot written at selected rows, a summed loss of the project's own masked
  per row, part of a mask, a dict key as no mask and int() of a numpy number were written after reading it.
- tests/corpus/fix_heldout13: written after those: stable-baselines3's PPO over its numpy rollout buffer,
  CenterPoint's heads, mmseg's OHEM sampler, BiSeNet's OhemCELoss, the Lovasz-Softmax loss, VQGAN's adaptive
  weight, StyleGAN2-ADA's lazy regularization and ADA update, consistency training's schedules, DeepSpeed's
  top-1 MoE, RWKV-4 generating with numpy top-p, LLM.int8 under a LoRA adapter, StreamingLLM's KV eviction,
  prototypical networks, EEND's PIT loss, Demucs, BERT4Rec, Instant-NGP's occupancy grid. Measured unseen
  once (5 of 31 fixable sites removed, 1 verified at a must-not site: a count read later as a size); the
  lambda attribute inlined, counts placed by scatter, randint for random_, a slice at a tensor bound as a
  where, numpy's conditional, float() of numpy kept an array (and an element at its argmax gathered), a
  stack of built tensors indexed, prefix sums, numpy over plain numbers as math, a comprehension as a loop,
  modules in plain lists, functions a module holds and objects among the inputs swapped in verification,
  and int() in a test as .long() were written after reading it.
- tests/corpus/fix_heldout14: written after those: mmaction2's TSM and audio recognizers, SlowFast's test
  meter, TimeSformer, WaveGlow, DBNet's loss, PARSeq, DeepAR, TimesNet, SAINT, GAIL, DPM-Solver++ with
  guidance and its adaptive solver, latent consistency sampling, Megatron-LM's GPT step, PartialFC with
  ArcFace, LSQ quantization, movement pruning, PyTorch3D's ICP, NeuS, OneNet. Measured unseen once (14 of 38
  fixable sites removed, 1 verified at a must-not site: a ValueError check made an assert; its first run
  found fix crashing on WaveGlow's weight norm, fixed before the figure); the check's exception kept apart,
  a state update under a Python flag and the guidance gradient reached through a solver's lambda were
  written after reading it; DBNet's hard negatives (a top-k by a count, fix/topk.py, and patches verified
  applied with another) and its if/else return were written after it, before set 15 was measured.
- tests/corpus/fix_heldout15: written after those: HRNet's training step and PCK, mmpose's top-down test,
  mmdetection's ATSS assigner, detectron2's RPN and ROI heads, fairseq's wav2vec 2.0 pre-training and its
  label-smoothed translation criterion, ESPnet's ASR front end and attention decoder, BLIP's image-text
  matching with hard negatives, DeepCTR's DIN, RecBole's SASRec evaluation, PyG's GPS graph transformer, SwAV,
  BEiT, ESM variant scoring, OpenFold's validation metrics, MONAI's Dice+CE step, nanoGPT's estimate_loss,
  mmocr's SAR. Measured unseen once (15 of 47 fixable sites removed, 0 verified at a must-not site); torch
  over Python sizes (fix/sizes.py), a method of two operands over selections and a column of nonzero pairs
  as a mask were written after reading it.
- tests/corpus/fix_heldout16: written after those: YOLACT's fast NMS, RetinaFace's numpy detect, DETR3D's
  NMS-free decoding, RT-DETR's post-processor, SSD's MultiBox loss, improved-diffusion's training step (torch
  imported as th), diffusers' DDPM scheduler, denoising-diffusion-pytorch's DDIM, stable-diffusion's PLMS,
  DiffWave's fast sampling, attention-is-all-you-need's beam search, torchmetrics' F1, semseg's and PAConv's
  validation, speechbrain's ECAPA embedding and EER, LAMB, alpha-zero-general, Performer's redraw, ConvNeXt's
  train step. Measured unseen once (2 of 40 fixable sites removed, 0 verified at a must-not site; fix first
  crashed on two config classes Python's deepcopy cannot copy and an optimizer whose state it drops, fixed
  before the figure); torch imported under another name was written after reading it.
- tests/corpus/fix_heldout17: written after those: Show-Attend-Tell's validation and beam search, Social GAN's
  variety loss and evaluation, ConvE's filtered ranking, GwcNet's and PSMNet's stereo steps, PatchCore,
  LoFTR's coarse loss, SuPar's biaffine parser, CLAM, N-BEATS, AdaIN, EWC, Zero-DCE, the FNO, FlowNet,
  monodepth2's depth metrics, the Mahalanobis detector. Measured unseen once (3 of 42 fixable sites
  removed, 0 verified at a must-not site; fix first refused N-BEATS' step, whose model draws from a
  generator and holds a local loss function, fixed before the figure); floats kept as tensors in what a held
  object keeps and in a float a module only adds to, and a state update of a local name under a Python test
  were written after reading it; so were the recurrence of nn.LSTM / nn.GRU written out with the module's
  weights (sets 14, 15 and 17 have it) and a second selection's lines carried by the first's patch.
- tests/corpus/fix_heldout18: written after those: Wave-U-Net's validation with STOI, short-chunk music
  tagging, RPMNet, STCN's evaluation and training, GAE link prediction, RKD distillation, U2PL, Bayesian crowd
  counting, Ultra-Fast lane detection, reid-strong-baseline's triplet/center loss and rank-1/mAP, VoxelMorph,
  ConvLSTM nowcasting, ProteinMPNN, CRAFT, bottom-up-attention VQA, CLIP4Clip. Measured unseen once (13 of
  37 fixable sites removed, 1 verified at a must-not site: a `logging.debug` under Python's default level,
  guarded, as in sets 5, 8 and 11; no program refused); the flatten_parameters calls dropped and a class a
  setting picks for the recurrence, batch-hard mining as a masked max/min over rows, and the old Tensor.new
  idioms were written after reading it.

Prints, per set and per break category, the sites found, removed by verified patches,
proposed (not verified) and left alone; the share of fixable sites removed (goal: 75%);
verified patches at must-not sites (goal: 0); verified patches that change an output on
inputs fix never saw (goal: 0); sites nobody marked.

Run:  .venv/bin/python benchmarks/fix_heldout.py [1-18]   (every set when none is named)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.corpus import (  # the repository root is on the path
    fix_heldout,
    fix_heldout2,
    fix_heldout3,
    fix_heldout4,
    fix_heldout5,
    fix_heldout6,
    fix_heldout7,
    fix_heldout8,
    fix_heldout9,
    fix_heldout10,
    fix_heldout11,
    fix_heldout12,
    fix_heldout13,
    fix_heldout14,
    fix_heldout15,
    fix_heldout16,
    fix_heldout17,
    fix_heldout18,
)
from tests.corpus.fix_measure import measure_held_out, table

SETS = {"1": ("tests/corpus/fix_heldout (read while writing rewrites)", fix_heldout.PROGRAMS),
        "2": ("tests/corpus/fix_heldout2 (read while writing rewrites)", fix_heldout2.PROGRAMS),
        "3": ("tests/corpus/fix_heldout3 (read while writing rewrites)", fix_heldout3.PROGRAMS),
        "4": ("tests/corpus/fix_heldout4 (read while writing rewrites)", fix_heldout4.PROGRAMS),
        "5": ("tests/corpus/fix_heldout5 (read while writing rewrites)", fix_heldout5.PROGRAMS),
        "6": ("tests/corpus/fix_heldout6 (read while writing rewrites)", fix_heldout6.PROGRAMS),
        "7": ("tests/corpus/fix_heldout7 (read while writing rewrites)", fix_heldout7.PROGRAMS),
        "8": ("tests/corpus/fix_heldout8 (read while writing rewrites)", fix_heldout8.PROGRAMS),
        "9": ("tests/corpus/fix_heldout9 (read while writing rewrites)", fix_heldout9.PROGRAMS),
        "10": ("tests/corpus/fix_heldout10 (read while writing rewrites)", fix_heldout10.PROGRAMS),
        "11": ("tests/corpus/fix_heldout11 (read while writing rewrites)", fix_heldout11.PROGRAMS),
        "12": ("tests/corpus/fix_heldout12 (read while writing rewrites)", fix_heldout12.PROGRAMS),
        "13": ("tests/corpus/fix_heldout13 (read while writing rewrites)", fix_heldout13.PROGRAMS),
        "14": ("tests/corpus/fix_heldout14 (read while writing rewrites)", fix_heldout14.PROGRAMS),
        "15": ("tests/corpus/fix_heldout15 (read while writing rewrites)", fix_heldout15.PROGRAMS),
        "16": ("tests/corpus/fix_heldout16 (read while writing rewrites)", fix_heldout16.PROGRAMS),
        "17": ("tests/corpus/fix_heldout17 (read while writing rewrites)", fix_heldout17.PROGRAMS),
        "18": ("tests/corpus/fix_heldout18 (measured unseen)", fix_heldout18.PROGRAMS)}


def measure_set(title: str, programs: dict) -> None:
    started = time.perf_counter()
    m = measure_held_out(programs)
    per = m["per"]
    print(f"\n== {title}: {len(programs)} programs")
    print(table(per))
    found = sum(r["found"] for r in per.values())
    fixable = sum(r["fixable"] for r in per.values())
    removed = sum(r["removed"] for r in per.values())
    fixable_removed = sum(r["fixable removed"] for r in per.values())
    print(f"removed by verified patches: {removed} of {found} user-code sites ({removed / max(found, 1):.0%}); "
          f"{fixable_removed} of the {fixable} marked fixable ({fixable_removed / max(fixable, 1):.0%}); "
          f"{len(m['on_purpose'])} more where PyTorch or the program breaks on purpose")
    print(f"verified patches at must-not sites: {len(m['must_not_verified'])} {m['must_not_verified']}")
    print(f"verified patches that change an output on unseen inputs: {len(m['changed'])} {m['changed']}")
    print(f"verified patches not checked on unseen inputs (the program itself raised on the new draw): "
          f"{len(m['unchecked'])} {m['unchecked']}")
    print(f"sites nobody marked: {len(m['unmarked'])} {m['unmarked']}")
    print(f"programs fix refused (their sites counted, none removed): {len(m['raised'])} {m['raised']}")
    print(f"({time.perf_counter() - started:.1f} s)")


def main() -> None:
    for key in sys.argv[1:] or list(SETS):
        measure_set(*SETS[key])


if __name__ == "__main__":
    main()

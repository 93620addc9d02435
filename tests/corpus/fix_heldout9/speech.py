"""Speech models: a Hugging Face-style wav2vec 2.0 CTC fine-tuning forward with SpecAugment's
``mask_time_indices`` drawn in the model and LayerDrop, Whisper greedy decoding with the timestamp logit
rules, and a SpeechBrain-style SepFormer training objective (SI-SNR under permutation-invariant training)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# --------------------------------------------------------------------------- wav2vec 2.0 (transformers)


@dataclass
class Wav2Vec2Config:
    vocab_size: int = 12
    hidden_size: int = 32
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 64
    conv_dim: tuple[int, ...] = (16, 32)
    conv_kernel: tuple[int, ...] = (10, 3)
    conv_stride: tuple[int, ...] = (5, 2)
    num_conv_pos_embeddings: int = 8
    num_conv_pos_embedding_groups: int = 4
    layer_norm_eps: float = 1e-5
    layerdrop: float = 0.1
    feat_proj_dropout: float = 0.1
    hidden_dropout: float = 0.1
    apply_spec_augment: bool = True
    mask_time_prob: float = 0.3
    mask_time_length: int = 4
    mask_time_min_masks: int = 2
    pad_token_id: int = 0
    ctc_loss_reduction: str = "mean"
    ctc_zero_infinity: bool = True


def _compute_mask_indices(
    shape: tuple[int, int],
    mask_prob: float,
    mask_length: int,
    attention_mask: torch.LongTensor | None = None,
    min_masks: int = 0,
) -> np.ndarray:
    """
    Computes random mask spans for a given shape. Used to implement [SpecAugment: A Simple Data Augmentation Method for
    ASR](https://huggingface.co/papers/1904.08779). Note that this method is not optimized to run on TPU and should be run
    on CPU as part of the preprocessing during training.
    """
    batch_size, sequence_length = shape

    if mask_length < 1:
        raise ValueError("`mask_length` has to be bigger than 0.")

    if mask_length > sequence_length:
        raise ValueError(
            f"`mask_length` has to be smaller than `sequence_length`, but got `mask_length`: {mask_length}"
            f" and `sequence_length`: {sequence_length}`"
        )

    # epsilon is used for probabilistic rounding
    epsilon = np.random.rand(1).item()

    def compute_num_masked_span(input_length):
        """Given input length, compute how many spans should be masked"""
        num_masked_span = int(mask_prob * input_length / mask_length + epsilon)
        num_masked_span = max(num_masked_span, min_masks)

        # make sure num masked span <= sequence_length
        if num_masked_span * mask_length > sequence_length:
            num_masked_span = sequence_length // mask_length

        # make sure num_masked span is also <= input_length - (mask_length - 1)
        if input_length - (mask_length - 1) < num_masked_span:
            num_masked_span = max(input_length - (mask_length - 1), 0)

        return num_masked_span

    # compute number of masked spans in batch
    input_lengths = (
        attention_mask.detach().sum(-1).tolist()
        if attention_mask is not None
        else [sequence_length for _ in range(batch_size)]
    )

    # SpecAugment mask to fill
    spec_aug_mask = np.zeros((batch_size, sequence_length), dtype=bool)
    spec_aug_mask_idxs = []

    max_num_masked_span = compute_num_masked_span(sequence_length)

    if max_num_masked_span == 0:
        return spec_aug_mask

    for input_length in input_lengths:
        # compute num of masked spans for this input
        num_masked_span = compute_num_masked_span(input_length)

        # get random indices to mask
        spec_aug_mask_idx = np.random.choice(
            np.arange(input_length - (mask_length - 1)), num_masked_span, replace=False
        )

        # pick first sampled index that will serve as a dummy index to pad vector
        # to ensure same dimension for all batches due to probabilistic rounding
        # Picking first sample just pads those vectors twice.
        if len(spec_aug_mask_idx) == 0:
            # this case can only happen if `input_length` is strictly smaller then
            # `sequence_length` in which case the last token has to be a padding
            # token which we can use as a dummy mask id
            dummy_mask_idx = sequence_length - 1
        else:
            dummy_mask_idx = spec_aug_mask_idx[0]

        spec_aug_mask_idx = np.concatenate(
            [spec_aug_mask_idx, np.ones(max_num_masked_span - num_masked_span, dtype=np.int32) * dummy_mask_idx]
        )
        spec_aug_mask_idxs.append(spec_aug_mask_idx)

    spec_aug_mask_idxs = np.array(spec_aug_mask_idxs)

    # expand masked indices to masked spans
    spec_aug_mask_idxs = np.broadcast_to(
        spec_aug_mask_idxs[:, :, None], (batch_size, max_num_masked_span, mask_length)
    )
    spec_aug_mask_idxs = spec_aug_mask_idxs.reshape(batch_size, max_num_masked_span * mask_length)

    # add offset to the starting indexes so that indexes now create a span
    offsets = np.arange(mask_length)[None, None, :]
    offsets = np.broadcast_to(offsets, (batch_size, max_num_masked_span, mask_length)).reshape(
        batch_size, max_num_masked_span * mask_length
    )
    spec_aug_mask_idxs = spec_aug_mask_idxs + offsets

    # ensure that we cannot have indices larger than sequence_length
    if spec_aug_mask_idxs.max() > sequence_length - 1:
        spec_aug_mask_idxs[spec_aug_mask_idxs > sequence_length - 1] = sequence_length - 1

    # scatter indices to mask
    np.put_along_axis(spec_aug_mask, spec_aug_mask_idxs, 1, -1)

    return spec_aug_mask


class Wav2Vec2GroupNormConvLayer(nn.Module):
    def __init__(self, config: Wav2Vec2Config, layer_id: int = 0) -> None:
        super().__init__()
        self.in_conv_dim = config.conv_dim[layer_id - 1] if layer_id > 0 else 1
        self.out_conv_dim = config.conv_dim[layer_id]
        self.conv = nn.Conv1d(
            self.in_conv_dim,
            self.out_conv_dim,
            kernel_size=config.conv_kernel[layer_id],
            stride=config.conv_stride[layer_id],
            bias=False,
        )
        self.layer_norm = (
            nn.GroupNorm(num_groups=self.out_conv_dim, num_channels=self.out_conv_dim, affine=True)
            if layer_id == 0
            else None
        )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.conv(hidden_states)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return F.gelu(hidden_states)


class Wav2Vec2FeatureEncoder(nn.Module):
    """Construct the features from raw audio waveform"""

    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        self.conv_layers = nn.ModuleList(
            [Wav2Vec2GroupNormConvLayer(config, layer_id=i) for i in range(len(config.conv_dim))]
        )

    def forward(self, input_values: torch.Tensor) -> torch.Tensor:
        hidden_states = input_values[:, None]
        for conv_layer in self.conv_layers:
            hidden_states = conv_layer(hidden_states)
        return hidden_states


class Wav2Vec2FeatureProjection(nn.Module):
    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        self.layer_norm = nn.LayerNorm(config.conv_dim[-1], eps=config.layer_norm_eps)
        self.projection = nn.Linear(config.conv_dim[-1], config.hidden_size)
        self.dropout = nn.Dropout(config.feat_proj_dropout)

    def forward(self, hidden_states: torch.Tensor):
        # non-projected hidden states are needed for quantization
        norm_hidden_states = self.layer_norm(hidden_states)
        hidden_states = self.projection(norm_hidden_states)
        hidden_states = self.dropout(hidden_states)
        return hidden_states, norm_hidden_states


class Wav2Vec2PositionalConvEmbedding(nn.Module):
    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        self.conv = nn.Conv1d(
            config.hidden_size,
            config.hidden_size,
            kernel_size=config.num_conv_pos_embeddings,
            padding=config.num_conv_pos_embeddings // 2,
            groups=config.num_conv_pos_embedding_groups,
        )
        self.num_pad_remove = 1 if config.num_conv_pos_embeddings % 2 == 0 else 0

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = hidden_states.transpose(1, 2)
        hidden_states = self.conv(hidden_states)
        if self.num_pad_remove > 0:
            hidden_states = hidden_states[:, :, : -self.num_pad_remove]
        hidden_states = F.gelu(hidden_states)
        return hidden_states.transpose(1, 2)


class Wav2Vec2Attention(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        bsz, tgt_len, _ = hidden_states.size()
        shape = (bsz, tgt_len, self.num_heads, self.head_dim)
        query_states = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.scaling
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = F.softmax(attn_weights, dim=-1)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).reshape(bsz, tgt_len, self.embed_dim)
        return self.out_proj(attn_output)


class Wav2Vec2EncoderLayer(nn.Module):
    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        self.attention = Wav2Vec2Attention(config.hidden_size, config.num_attention_heads)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate_dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output_dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        attn_residual = hidden_states
        hidden_states = self.attention(hidden_states, attention_mask=attention_mask)
        hidden_states = attn_residual + hidden_states
        hidden_states = self.layer_norm(hidden_states)
        hidden_states = hidden_states + self.output_dense(F.gelu(self.intermediate_dense(hidden_states)))
        return self.final_layer_norm(hidden_states)


class Wav2Vec2Encoder(nn.Module):
    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        self.config = config
        self.pos_conv_embed = Wav2Vec2PositionalConvEmbedding(config)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.layers = nn.ModuleList([Wav2Vec2EncoderLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if attention_mask is not None:
            # make sure padded tokens output 0
            expand_attention_mask = attention_mask.unsqueeze(-1).repeat(1, 1, hidden_states.shape[2])
            hidden_states[~expand_attention_mask] = 0

            # extend attention_mask
            attention_mask = 1.0 - attention_mask[:, None, None, :].to(dtype=hidden_states.dtype)
            attention_mask = attention_mask * torch.finfo(hidden_states.dtype).min
            attention_mask = attention_mask.expand(
                attention_mask.shape[0], 1, attention_mask.shape[-1], attention_mask.shape[-1]
            )

        position_embeddings = self.pos_conv_embed(hidden_states)
        hidden_states = hidden_states + position_embeddings
        hidden_states = self.layer_norm(hidden_states)
        hidden_states = self.dropout(hidden_states)

        for layer in self.layers:
            # add LayerDrop (see https://huggingface.co/papers/1909.11556 for description)
            dropout_probability = torch.rand([])

            skip_the_layer = True if self.training and (dropout_probability < self.config.layerdrop) else False  # BREAK: compute the layer, torch.where on the draw
            if not skip_the_layer:
                hidden_states = layer(hidden_states, attention_mask=attention_mask)

        return hidden_states


class Wav2Vec2ForCTC(nn.Module):
    def __init__(self, config: Wav2Vec2Config) -> None:
        super().__init__()
        self.config = config
        self.feature_extractor = Wav2Vec2FeatureEncoder(config)
        self.feature_projection = Wav2Vec2FeatureProjection(config)
        self.masked_spec_embed = nn.Parameter(torch.empty(config.hidden_size).uniform_())
        self.encoder = Wav2Vec2Encoder(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size)

    def _get_feat_extract_output_lengths(self, input_lengths: torch.LongTensor | int):
        """Computes the output length of the convolutional layers"""

        def _conv_out_length(input_length, kernel_size, stride):
            # 1D convolutional layer output length formula taken
            # from https://pytorch.org/docs/stable/generated/torch.nn.Conv1d.html
            return torch.div(input_length - kernel_size, stride, rounding_mode="floor") + 1

        for kernel_size, stride in zip(self.config.conv_kernel, self.config.conv_stride, strict=True):
            input_lengths = _conv_out_length(input_lengths, kernel_size, stride)
        return input_lengths

    def _get_feature_vector_attention_mask(self, feature_vector_length: int, attention_mask: torch.LongTensor):
        # Effectively attention_mask.sum(-1), but not inplace to be able to run
        # on inference mode.
        non_padded_lengths = attention_mask.cumsum(dim=-1)[:, -1]
        output_lengths = self._get_feat_extract_output_lengths(non_padded_lengths).to(torch.long)
        batch_size = attention_mask.shape[0]

        attention_mask = torch.zeros(
            (batch_size, feature_vector_length), dtype=attention_mask.dtype, device=attention_mask.device
        )
        # these two operations makes sure that all values before the output lengths idxs are attended to
        attention_mask[(torch.arange(attention_mask.shape[0], device=attention_mask.device), output_lengths - 1)] = 1
        attention_mask = attention_mask.flip([-1]).cumsum(-1).flip([-1]).bool()
        return attention_mask

    def _mask_hidden_states(
        self,
        hidden_states: torch.FloatTensor,
        mask_time_indices: torch.FloatTensor | None = None,
        attention_mask: torch.LongTensor | None = None,
    ):
        """
        Masks extracted features along time axis according to
        [SpecAugment](https://huggingface.co/papers/1904.08779).
        """
        # `config.apply_spec_augment` can set masking to False
        if not getattr(self.config, "apply_spec_augment", True):
            return hidden_states

        # generate indices & apply SpecAugment along time axis
        batch_size, sequence_length, hidden_size = hidden_states.size()

        if mask_time_indices is not None:
            # apply SpecAugment along time axis with given mask_time_indices
            hidden_states[mask_time_indices] = self.masked_spec_embed.to(hidden_states.dtype)
        elif self.config.mask_time_prob > 0 and self.training:
            mask_time_indices = _compute_mask_indices(
                (batch_size, sequence_length),
                mask_prob=self.config.mask_time_prob,
                mask_length=self.config.mask_time_length,
                attention_mask=attention_mask,
                min_masks=self.config.mask_time_min_masks,
            )
            mask_time_indices = torch.tensor(mask_time_indices, device=hidden_states.device, dtype=torch.bool)
            hidden_states[mask_time_indices] = self.masked_spec_embed.to(hidden_states.dtype)

        return hidden_states

    def forward(self, input_values, attention_mask=None, mask_time_indices=None, labels=None):
        extract_features = self.feature_extractor(input_values)
        extract_features = extract_features.transpose(1, 2)

        if attention_mask is not None:
            # compute reduced attention_mask corresponding to feature vectors
            attention_mask = self._get_feature_vector_attention_mask(extract_features.shape[1], attention_mask)

        hidden_states, extract_features = self.feature_projection(extract_features)
        hidden_states = self._mask_hidden_states(
            hidden_states, mask_time_indices=mask_time_indices, attention_mask=attention_mask
        )
        hidden_states = self.encoder(hidden_states, attention_mask=attention_mask)
        logits = self.lm_head(hidden_states)

        loss = None
        if labels is not None:
            # retrieve loss input_lengths from attention_mask
            input_lengths = attention_mask.sum(-1).to(torch.long)

            # assuming that padded tokens are filled with -100
            # when not being attended to
            labels_mask = labels >= 0
            target_lengths = labels_mask.sum(-1)
            flattened_targets = labels.masked_select(labels_mask)  # BREAK: padded (B, S) targets to ctc_loss

            # ctc_loss doesn't support fp16
            log_probs = F.log_softmax(logits, dim=-1, dtype=torch.float32).transpose(0, 1)
            loss = F.ctc_loss(  # BREAK: same rewrite (1-D targets: the longest target is data-dependent)
                log_probs,
                flattened_targets,
                input_lengths,
                target_lengths,
                blank=self.config.pad_token_id,
                reduction=self.config.ctc_loss_reduction,
                zero_infinity=self.config.ctc_zero_infinity,
            )
        return loss, logits


class DataCollatorCTCWithSpecAugment:
    """Pads a batch and draws SpecAugment's time mask on the host, the way the pretraining collator of the
    transformers examples does (``_compute_mask_indices`` is numpy and meant to run in the data pipeline)."""

    def __init__(self, model: Wav2Vec2ForCTC) -> None:
        self.model = model

    def __call__(self, input_values, attention_mask, labels):
        config = self.model.config
        feature_length = int(self.model._get_feat_extract_output_lengths(input_values.shape[-1]))
        sub_attention_mask = self.model._get_feature_vector_attention_mask(feature_length, attention_mask)
        mask_time_indices = _compute_mask_indices(
            (input_values.shape[0], feature_length),
            mask_prob=config.mask_time_prob,
            mask_length=config.mask_time_length,
            attention_mask=sub_attention_mask,
            min_masks=config.mask_time_min_masks,
        )
        return {
            "input_values": input_values,
            "attention_mask": attention_mask,
            "mask_time_indices": torch.tensor(mask_time_indices, dtype=torch.bool),
            "labels": labels,
        }


def build_wav2vec2_ctc():
    torch.manual_seed(900)
    np.random.seed(900)
    model = Wav2Vec2ForCTC(Wav2Vec2Config()).train()
    g = seeded(901)
    lengths = torch.tensor([400, 330, 370])
    input_values = torch.randn(3, 400, generator=g)
    attention_mask = (torch.arange(400)[None, :] < lengths[:, None]).long()
    input_values = input_values * attention_mask
    labels = torch.randint(1, 12, (3, 8), generator=g)
    labels[1, 6:] = -100
    labels[2, 7:] = -100
    return model, DataCollatorCTCWithSpecAugment(model)(input_values, attention_mask, labels)


# --------------------------------------------------------------------------- Whisper timestamp rules


@dataclass
class WhisperGenerationConfig:
    eos_token_id: int = 50
    bos_token_id: int = 50
    decoder_start_token_id: int = 51
    no_timestamps_token_id: int = 54
    forced_decoder_ids: list | None = None
    max_initial_timestamp_index: int | None = 4


class WhisperTimeStampLogitsProcessor:
    r"""
    [`LogitsProcessor`] that modifies the logits for the generation of timestamps in the transcription. When the input
    tokens are at a specific threshold, the processor sets the scores to negative infinity. The processor makes sure
    that timestamp tokens appear in pairs, by masking out the logits that would break this pairing pattern. This is
    done to maintain the consistency and structure of generated timestamps. It also ensures that when the predicted
    probability of sampling any of the timestamp token is greater than any individual non-timestamp token, those
    non-timestamp logits are set to negative infinity. This is done to ensure the generation of timestamps over other
    potential tokens.
    """

    def __init__(self, generate_config: WhisperGenerationConfig, begin_index: int | None = None,
                 _detect_timestamp_from_logprob: bool | None = None) -> None:
        self.no_timestamps_token_id = generate_config.no_timestamps_token_id
        self.timestamp_begin = generate_config.no_timestamps_token_id + 1
        self.eos_token_id = generate_config.eos_token_id or generate_config.bos_token_id

        # this variable is mostly just used for testing
        self._detect_timestamp_from_logprob = (
            _detect_timestamp_from_logprob
            if _detect_timestamp_from_logprob is not None
            else getattr(generate_config, "_detect_timestamp_from_logprob", True)
        )

        num_forced_ids = (
            len(generate_config.forced_decoder_ids) if generate_config.forced_decoder_ids is not None else 0
        )
        self.begin_index = begin_index or (num_forced_ids + 1)

        self.max_initial_timestamp_index = getattr(generate_config, "max_initial_timestamp_index", None)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        # suppress <|notimestamps|> which is handled by without_timestamps
        scores_processed = scores.clone()
        scores_processed[:, self.no_timestamps_token_id] = -float("inf")

        # timestamps have to appear in pairs, except directly before eos_token; mask logits accordingly
        for k in range(input_ids.shape[0]):
            sampled_tokens = input_ids[k, self.begin_index :]
            seq = list(sampled_tokens.tolist())

            last_was_timestamp = len(seq) >= 1 and seq[-1] >= self.timestamp_begin
            penultimate_was_timestamp = len(seq) < 2 or seq[-2] >= self.timestamp_begin

            if last_was_timestamp:
                if penultimate_was_timestamp:  # has to be non-timestamp
                    scores_processed[k, self.timestamp_begin :] = -float("inf")
                else:  # cannot be normal text tokens
                    scores_processed[k, : self.eos_token_id] = -float("inf")

            timestamps = sampled_tokens[sampled_tokens.ge(self.timestamp_begin)]  # BREAK: rules as batch masks
            if timestamps.numel() > 0:
                # `timestamps` shouldn't decrease; forbid timestamp tokens smaller than the last
                # The following lines of code are copied from: https://github.com/openai/whisper/pull/914/files#r1137085090
                if last_was_timestamp and not penultimate_was_timestamp:
                    timestamp_last = timestamps[-1]
                else:
                    # Avoid to emit <|0.00|> again
                    timestamp_last = timestamps[-1] + 1

                scores_processed[k, self.timestamp_begin : timestamp_last] = -float("inf")

        # apply the `max_initial_timestamp` option
        if input_ids.shape[1] == self.begin_index:
            scores_processed[:, : self.timestamp_begin] = -float("inf")

            if self.max_initial_timestamp_index is not None:
                last_allowed = self.timestamp_begin + self.max_initial_timestamp_index
                scores_processed[:, last_allowed + 1 :] = -float("inf")

        # if sum of probability over timestamps is above any other token, sample timestamp
        logprobs = F.log_softmax(scores_processed.float(), dim=-1)
        for k in range(input_ids.shape[0]):
            timestamp_logprob = logprobs[k, self.timestamp_begin :].logsumexp(dim=-1)
            max_text_token_logprob = logprobs[k, : self.timestamp_begin].max()
            if timestamp_logprob > max_text_token_logprob and self._detect_timestamp_from_logprob:
                scores_processed[k, : self.timestamp_begin] = -float("inf")

        return scores_processed


class WhisperLite(nn.Module):
    """Conv front end + one encoder layer; a one-layer decoder with cross-attention and tied output embedding."""

    def __init__(self, n_mels: int = 16, d_model: int = 32, vocab: int = 64, n_ctx: int = 16) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(n_mels, d_model, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d_model, d_model, kernel_size=3, stride=2, padding=1)
        self.enc_attn = nn.MultiheadAttention(d_model, 4, batch_first=True)
        self.enc_ln = nn.LayerNorm(d_model)
        self.embed_tokens = nn.Embedding(vocab, d_model)
        self.embed_positions = nn.Embedding(n_ctx, d_model)
        self.self_attn = nn.MultiheadAttention(d_model, 4, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d_model, 4, batch_first=True)
        self.fc = nn.Sequential(nn.Linear(d_model, 64), nn.GELU(), nn.Linear(64, d_model))
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.ln3 = nn.LayerNorm(d_model)

    def encode(self, input_features: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.conv2(F.gelu(self.conv1(input_features)))).transpose(1, 2)
        x = x + self.enc_attn(x, x, x, need_weights=False)[0]
        return self.enc_ln(x)

    def decode(self, decoder_input_ids: torch.Tensor, encoder_hidden_states: torch.Tensor) -> torch.Tensor:
        T = decoder_input_ids.size(1)
        h = self.embed_tokens(decoder_input_ids) + self.embed_positions.weight[:T]
        causal = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        q = self.ln1(h)
        h = h + self.self_attn(q, q, q, attn_mask=causal, need_weights=False)[0]
        q = self.ln2(h)
        h = h + self.cross_attn(q, encoder_hidden_states, encoder_hidden_states, need_weights=False)[0]
        h = h + self.fc(self.ln3(h))
        return h @ self.embed_tokens.weight.t()


def greedy_generate_with_timestamps(model, input_features, generation_config, max_new_tokens=8):
    encoder_hidden_states = model.encode(input_features)
    batch_size = input_features.shape[0]
    decoder_input_ids = torch.full(
        (batch_size, 1), generation_config.decoder_start_token_id, dtype=torch.long
    )
    logits_processor = WhisperTimeStampLogitsProcessor(generation_config, begin_index=1)
    for _ in range(max_new_tokens):
        logits = model.decode(decoder_input_ids, encoder_hidden_states)
        next_token_logits = logits[:, -1, :]
        next_token_scores = logits_processor(decoder_input_ids, next_token_logits)
        next_tokens = torch.argmax(next_token_scores, dim=-1)
        decoder_input_ids = torch.cat([decoder_input_ids, next_tokens[:, None]], dim=-1)
    return decoder_input_ids


def build_whisper_timestamps():
    torch.manual_seed(910)
    model = WhisperLite().eval()
    with torch.no_grad():  # a decoder that reaches for timestamp tokens at segment boundaries, as a trained one does
        model.embed_tokens.weight[55:] += 1.0
        model.embed_tokens.weight.mul_(3.0)
        timestamp_direction = model.embed_tokens.weight[55:].mean(0)
        model.embed_positions.weight[3] += 0.5 * timestamp_direction
        model.embed_positions.weight[6] += 0.5 * timestamp_direction
    input_features = torch.randn(3, 16, 20, generator=seeded(911))
    return greedy_generate_with_timestamps, (model, input_features, WhisperGenerationConfig(), 8)


# --------------------------------------------------------------------------- SepFormer-style PIT SI-SNR


def get_mask(source: torch.Tensor, source_lengths: torch.Tensor) -> torch.Tensor:
    """
    Arguments
    ---------
    source : [T, B, C]
    source_lengths : [B]

    Returns
    -------
    mask : [T, B, 1]
    """
    mask = source.new_ones(source.size()[:-1]).unsqueeze(-1).transpose(1, -2)
    B = source.size(-2)
    for i in range(B):
        mask[source_lengths[i] :, i] = 0  # BREAK: arange(T)[:, None] < source_lengths, no loop
    return mask.transpose(-2, 1)


def cal_si_snr(source: torch.Tensor, estimate_source: torch.Tensor) -> torch.Tensor:
    """Calculate SI-SNR.

    Arguments
    ---------
    source: [T, B, C], Where B is batch size, T is the length of the sources, C is the number of sources
    estimate_source: [T, B, C]
    """
    EPS = 1e-8
    assert source.size() == estimate_source.size()
    device = estimate_source.device.type

    source_lengths = torch.tensor([estimate_source.shape[0]] * estimate_source.shape[-2], device=device)
    mask = get_mask(source, source_lengths)
    estimate_source *= mask

    num_samples = source_lengths.contiguous().reshape(1, -1, 1).float()  # [1, B, 1]
    mean_target = torch.sum(source, dim=0, keepdim=True) / num_samples
    mean_estimate = torch.sum(estimate_source, dim=0, keepdim=True) / num_samples
    zero_mean_target = source - mean_target
    zero_mean_estimate = estimate_source - mean_estimate
    # mask padding position along T
    zero_mean_target *= mask
    zero_mean_estimate *= mask

    # Step 2. SI-SNR with PIT
    # reshape to use broadcast
    s_target = zero_mean_target  # [T, B, C]
    s_estimate = zero_mean_estimate  # [T, B, C]
    # s_target = <s', s>s / ||s||^2
    dot = torch.sum(s_estimate * s_target, dim=0, keepdim=True)  # [1, B, C]
    s_target_energy = torch.sum(s_target**2, dim=0, keepdim=True) + EPS  # [1, B, C]
    proj = dot * s_target / s_target_energy  # [T, B, C]
    # e_noise = s' - s_target
    e_noise = s_estimate - proj  # [T, B, C]
    # SI-SNR = 10 * log_10(||s_target||^2 / ||e_noise||^2)
    si_snr_beforelog = torch.sum(proj**2, dim=0) / (torch.sum(e_noise**2, dim=0) + EPS)
    si_snr = 10 * torch.log10(si_snr_beforelog + EPS)  # [B, C]

    return -si_snr.unsqueeze(0)


class PitWrapper(nn.Module):
    """Permutation Invariant Wrapper to allow Permutation Invariant Training (PIT) with existing losses."""

    def __init__(self, base_loss) -> None:
        super().__init__()
        self.base_loss = base_loss

    def _fast_pit(self, loss_mat: torch.Tensor):
        loss = None
        assigned_perm = None
        for p in permutations(range(loss_mat.shape[0])):
            c_loss = loss_mat[range(loss_mat.shape[0]), p].mean()
            if loss is None or loss > c_loss:  # BREAK: stack the permutations' losses, min + argmin
                loss = c_loss
                assigned_perm = p
        return loss, assigned_perm

    def _opt_perm_loss(self, pred: torch.Tensor, target: torch.Tensor):
        n_sources = pred.size(-1)

        pred = pred.unsqueeze(-2).repeat(*[1 for x in range(len(pred.shape) - 1)], n_sources, 1)
        target = target.unsqueeze(-1).repeat(1, *[1 for x in range(len(target.shape) - 1)], n_sources)

        loss_mat = self.base_loss(pred, target)
        assert len(loss_mat.shape) >= 2, "Base loss should not perform any reduction operation"
        mean_over = [x for x in range(len(loss_mat.shape))]
        loss_mat = loss_mat.mean(dim=mean_over[:-2])

        return self._fast_pit(loss_mat)

    def forward(self, preds: torch.Tensor, targets: torch.Tensor):
        losses = []
        perms = []
        for pred, label in zip(preds, targets, strict=True):
            loss, p = self._opt_perm_loss(pred, label)
            perms.append(p)
            losses.append(loss)
        loss = torch.stack(losses)
        return loss, perms


def get_si_snr_with_pitwrapper(source: torch.Tensor, estimate_source: torch.Tensor) -> torch.Tensor:
    pit_si_snr = PitWrapper(cal_si_snr)
    loss, perms = pit_si_snr(source, estimate_source)
    return loss


class ConvTasNetLite(nn.Module):
    """Encoder, a small mask network, decoder; estimates `num_spks` sources from a mixture."""

    def __init__(self, num_spks: int = 3, n_filters: int = 16, kernel: int = 8) -> None:
        super().__init__()
        self.num_spks = num_spks
        self.encoder = nn.Conv1d(1, n_filters, kernel, stride=kernel // 2, bias=False)
        self.masknet = nn.Sequential(
            nn.Conv1d(n_filters, 32, 3, padding=1), nn.PReLU(), nn.Conv1d(32, n_filters * num_spks, 1)
        )
        self.decoder = nn.ConvTranspose1d(n_filters, 1, kernel, stride=kernel // 2, bias=False)

    def forward(self, mix: torch.Tensor) -> torch.Tensor:
        mix_w = F.relu(self.encoder(mix.unsqueeze(1)))
        est_mask = torch.sigmoid(self.masknet(mix_w)).view(mix.size(0), self.num_spks, -1, mix_w.size(-1))
        sep_h = mix_w.unsqueeze(1) * est_mask
        est_source = torch.stack(
            [self.decoder(sep_h[:, i]).squeeze(1) for i in range(self.num_spks)], dim=-1
        )
        # T changed after conv1d in encoder, fix it here
        T_origin = mix.size(1)
        T_est = est_source.size(1)
        if T_origin > T_est:
            est_source = F.pad(est_source, (0, 0, 0, T_origin - T_est))
        else:
            est_source = est_source[:, :T_origin, :]
        return est_source


class SeparationStep(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = ConvTasNetLite()

    def compute_objectives(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Computes the si-snr loss"""
        return get_si_snr_with_pitwrapper(targets, predictions)

    def forward(self, mixture: torch.Tensor, targets: torch.Tensor):
        predictions = self.model(mixture)
        loss = self.compute_objectives(predictions, targets)
        return loss.mean(), predictions


def build_sepformer_pit():
    torch.manual_seed(920)
    model = SeparationStep()
    g = seeded(921)
    targets = torch.randn(2, 64, 3, generator=g)
    mixture = targets.sum(-1)
    return model, (mixture, targets)

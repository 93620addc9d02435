"""Speech and text recognition: Hugging Face's ``Wav2Vec2ForPreTraining`` (conv feature encoder, span masking
from the data collator, the Gumbel codebook quantizer with its perplexity, the contrastive loss over sampled
distractors), a HuBERT masked-prediction step in fairseq's shape whose model draws its own SpecAugment spans
(transformers' ``HubertModel._mask_hidden_states``), and clovaai/deep-text-recognition-benchmark's
VGG + CTC recognizer with its ``CTCLabelConverter`` and validation accuracy."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import Block, compute_mask_indices, seeded

# ------------------------------------------------------------------ wav2vec 2.0 building blocks


class FeatureEncoder(nn.Module):
    """The conv stack over raw audio (group norm on the first layer, as in the base config)."""

    def __init__(self, conv_dim=(8, 8, 8), conv_kernel=(10, 3, 3), conv_stride=(5, 2, 2)):
        super().__init__()
        self.conv_kernel, self.conv_stride = conv_kernel, conv_stride
        layers = []
        in_dim = 1
        for i, (dim, k, s) in enumerate(zip(conv_dim, conv_kernel, conv_stride, strict=True)):
            layers.append(nn.Conv1d(in_dim, dim, k, stride=s, bias=False))
            if i == 0:
                layers.append(nn.GroupNorm(dim, dim, affine=True))
            layers.append(nn.GELU())
            in_dim = dim
        self.conv_layers = nn.Sequential(*layers)

    def forward(self, input_values):
        return self.conv_layers(input_values[:, None])


class Wav2Vec2Encoder(nn.Module):
    def __init__(self, hidden=16, heads=2, layers=2):
        super().__init__()
        self.pos_conv_embed = nn.Conv1d(hidden, hidden, kernel_size=4, padding=2, groups=2)
        self.layer_norm = nn.LayerNorm(hidden)
        self.layers = nn.ModuleList([Block(hidden, heads) for _ in range(layers)])

    def forward(self, hidden_states, attention_mask=None):
        if attention_mask is not None:
            hidden_states = hidden_states * attention_mask[..., None].to(hidden_states.dtype)
        pos = self.pos_conv_embed(hidden_states.transpose(1, 2))[:, :, :-1].transpose(1, 2)
        hidden_states = self.layer_norm(hidden_states + F.gelu(pos))
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask)
        return hidden_states


class Wav2Vec2Base(nn.Module):
    def __init__(self, conv_dim=8, hidden=16):
        super().__init__()
        self.feature_extractor = FeatureEncoder()
        self.feature_projection = nn.Sequential(nn.LayerNorm(conv_dim), nn.Linear(conv_dim, hidden))
        self.masked_spec_embed = nn.Parameter(torch.rand(hidden))
        self.encoder = Wav2Vec2Encoder(hidden)

    def _get_feat_extract_output_lengths(self, input_lengths):
        for kernel_size, stride in zip(self.feature_extractor.conv_kernel, self.feature_extractor.conv_stride, strict=True):
            input_lengths = torch.div(input_lengths - kernel_size, stride, rounding_mode="floor") + 1
        return input_lengths

    def _get_feature_vector_attention_mask(self, feature_vector_length, attention_mask):
        non_padded_lengths = attention_mask.cumsum(dim=-1)[:, -1]
        output_lengths = self._get_feat_extract_output_lengths(non_padded_lengths).to(torch.long)
        batch_size = attention_mask.shape[0]
        attention_mask = torch.zeros((batch_size, feature_vector_length), dtype=attention_mask.dtype, device=attention_mask.device)
        attention_mask[(torch.arange(batch_size, device=attention_mask.device), output_lengths - 1)] = 1
        return attention_mask.flip([-1]).cumsum(-1).flip([-1]).bool()


# ------------------------------------------------------------------ Wav2Vec2ForPreTraining


class GumbelVectorQuantizer(nn.Module):
    def __init__(self, conv_dim=8, codevector_dim=8, num_groups=2, num_vars=8):
        super().__init__()
        self.num_groups, self.num_vars = num_groups, num_vars
        self.codevectors = nn.Parameter(torch.FloatTensor(1, num_groups * num_vars, codevector_dim // num_groups))
        self.weight_proj = nn.Linear(conv_dim, num_groups * num_vars)
        nn.init.uniform_(self.codevectors)
        self.temperature = 2.0

    @staticmethod
    def _compute_perplexity(probs, mask=None):
        if mask is not None:
            mask_extended = mask.flatten()[:, None, None].expand(probs.shape)
            probs = torch.where(mask_extended, probs, torch.zeros_like(probs))
            marginal_probs = probs.sum(dim=0) / mask.sum()
        else:
            marginal_probs = probs.mean(dim=0)
        return torch.exp(-torch.sum(marginal_probs * torch.log(marginal_probs + 1e-7), dim=-1)).sum()

    def forward(self, hidden_states, mask_time_indices=None):
        batch_size, sequence_length, hidden_size = hidden_states.shape
        hidden_states = self.weight_proj(hidden_states)
        hidden_states = hidden_states.view(batch_size * sequence_length * self.num_groups, -1)
        if self.training:
            codevector_probs = F.gumbel_softmax(hidden_states.float(), tau=self.temperature, hard=True).type_as(hidden_states)
            codevector_soft_dist = torch.softmax(
                hidden_states.view(batch_size * sequence_length, self.num_groups, -1).float(), dim=-1)
            perplexity = self._compute_perplexity(codevector_soft_dist, mask_time_indices)
        else:
            codevector_idx = hidden_states.argmax(dim=-1)
            codevector_probs = hidden_states.new_zeros(hidden_states.shape).scatter_(-1, codevector_idx.view(-1, 1), 1.0)
            codevector_probs = codevector_probs.view(batch_size * sequence_length, self.num_groups, -1)
            perplexity = self._compute_perplexity(codevector_probs, mask_time_indices)
        codevector_probs = codevector_probs.view(batch_size * sequence_length, -1)
        codevectors_per_group = codevector_probs.unsqueeze(-1) * self.codevectors
        codevectors = codevectors_per_group.view(batch_size * sequence_length, self.num_groups, self.num_vars, -1)
        codevectors = codevectors.sum(-2).view(batch_size, sequence_length, -1)
        return codevectors, perplexity


class Wav2Vec2ForPreTraining(nn.Module):
    def __init__(self, hidden=16, proj_codevector_dim=8, codevector_dim=8, contrastive_logits_temperature=0.1,
                 diversity_loss_weight=0.1):
        super().__init__()
        self.wav2vec2 = Wav2Vec2Base(hidden=hidden)
        self.quantizer = GumbelVectorQuantizer(codevector_dim=codevector_dim)
        self.project_hid = nn.Linear(hidden, proj_codevector_dim)
        self.project_q = nn.Linear(codevector_dim, proj_codevector_dim)
        self.temperature = contrastive_logits_temperature
        self.diversity_loss_weight = diversity_loss_weight

    def set_gumbel_temperature(self, temperature: float) -> None:
        self.quantizer.temperature = temperature

    @staticmethod
    def compute_contrastive_logits(target_features, negative_features, predicted_features, temperature=0.1):
        target_features = torch.cat([target_features, negative_features], dim=0)
        logits = torch.cosine_similarity(predicted_features.float(), target_features.float(), dim=-1).type_as(target_features)
        return logits / temperature

    def forward(self, input_values, attention_mask, mask_time_indices, sampled_negative_indices):
        base = self.wav2vec2
        extract_features = base.feature_extractor(input_values).transpose(1, 2)
        sub_attention_mask = base._get_feature_vector_attention_mask(extract_features.shape[1], attention_mask)
        hidden_states = base.feature_projection(extract_features)
        hidden_states[mask_time_indices] = base.masked_spec_embed.to(hidden_states.dtype)
        hidden_states = base.encoder(hidden_states, attention_mask=sub_attention_mask)

        transformer_features = self.project_hid(hidden_states)
        quantized_features, codevector_perplexity = self.quantizer(extract_features, mask_time_indices=mask_time_indices)
        quantized_features = self.project_q(quantized_features.to(self.project_q.weight.dtype))

        batch_size, sequence_length, hidden_size = quantized_features.shape
        negative_quantized_features = quantized_features.view(-1, hidden_size)[sampled_negative_indices.long().view(-1)]
        negative_quantized_features = negative_quantized_features.view(
            batch_size, sequence_length, -1, hidden_size).permute(2, 0, 1, 3)
        logits = self.compute_contrastive_logits(quantized_features[None, :], negative_quantized_features,
                                                 transformer_features, self.temperature)
        # a distractor equal to the positive cannot be told apart from it: push it out of the softmax
        neg_is_pos = (quantized_features == negative_quantized_features).all(-1)
        if neg_is_pos.any():  # BREAK: the masked assignment is a no-op where nothing matches; do it unconditionally
            logits[1:][neg_is_pos] = float("-inf")

        logits = logits.transpose(0, 2).reshape(-1, logits.size(0))
        target = ((1 - mask_time_indices.long()) * -100).transpose(0, 1).flatten()
        contrastive_loss = F.cross_entropy(logits.float(), target, reduction="sum")
        num_codevectors = self.quantizer.num_vars * self.quantizer.num_groups
        diversity_loss = ((num_codevectors - codevector_perplexity) / num_codevectors) * mask_time_indices.sum()
        loss = contrastive_loss + self.diversity_loss_weight * diversity_loss
        return {"loss": loss, "contrastive_loss": contrastive_loss, "diversity_loss": diversity_loss,
                "codevector_perplexity": codevector_perplexity}


def sample_negative_indices(features_shape, num_negatives, mask_time_indices=None):
    """The collator's distractor draw (transformers' ``_sample_negative_indices``), in numpy."""
    batch_size, sequence_length = features_shape
    sequence_length_range = np.arange(sequence_length)
    sampled_negative_indices = np.zeros(shape=(batch_size, sequence_length, num_negatives), dtype=np.int32)
    mask_time_indices = mask_time_indices.astype(bool) if mask_time_indices is not None else np.ones(features_shape, dtype=bool)
    for batch_idx in range(batch_size):
        high = mask_time_indices[batch_idx].sum() - 1
        mapped_masked_indices = sequence_length_range[mask_time_indices[batch_idx]]
        feature_indices = np.broadcast_to(np.arange(high + 1)[:, None], (high + 1, num_negatives))
        sampled_indices = np.random.randint(0, high, size=(high + 1, num_negatives))
        sampled_indices[sampled_indices >= feature_indices] += 1
        sampled_negative_indices[batch_idx][mask_time_indices[batch_idx]] = mapped_masked_indices[sampled_indices]
        sampled_negative_indices[batch_idx] += batch_idx * sequence_length
    return sampled_negative_indices


def build_wav2vec2_pretrain():
    seeded(1203)
    model = Wav2Vec2ForPreTraining()
    model.set_gumbel_temperature(max(2.0 * 0.999995**100, 0.5))
    input_values = torch.randn(2, 400)
    attention_mask = torch.ones(2, 400, dtype=torch.long)
    attention_mask[1, 320:] = 0
    input_values[1, 320:] = 0.0
    seq_len = int(model.wav2vec2._get_feat_extract_output_lengths(torch.tensor(400)))
    sub_mask = model.wav2vec2._get_feature_vector_attention_mask(seq_len, attention_mask)
    mask_time_indices = compute_mask_indices((2, seq_len), mask_prob=0.4, mask_length=3,
                                             attention_mask=sub_mask.long(), min_masks=2)
    negatives = sample_negative_indices((2, seq_len), 4, mask_time_indices)
    return model, (input_values, attention_mask, torch.from_numpy(mask_time_indices),
                   torch.from_numpy(negatives))


# ------------------------------------------------------------------ HuBERT masked prediction


class HubertPretrain(nn.Module):
    """HuBERT's first iteration: predict k-means cluster ids of MFCC frames at the masked positions."""

    def __init__(self, hidden=16, num_classes=10, final_dim=8, mask_time_prob=0.5, mask_time_length=3,
                 mask_feature_prob=0.25, mask_feature_length=4, logit_temp=0.1):
        super().__init__()
        self.wav2vec2 = Wav2Vec2Base(hidden=hidden)
        self.mask_time_prob, self.mask_time_length = mask_time_prob, mask_time_length
        self.mask_feature_prob, self.mask_feature_length = mask_feature_prob, mask_feature_length
        self.final_proj = nn.Linear(hidden, final_dim)
        self.label_embs_concat = nn.Parameter(torch.FloatTensor(num_classes, final_dim))
        nn.init.uniform_(self.label_embs_concat)
        self.logit_temp = logit_temp

    def _mask_hidden_states(self, hidden_states, attention_mask=None):
        batch_size, sequence_length, hidden_size = hidden_states.size()
        mask_time_indices = None
        if self.mask_time_prob > 0 and self.training:
            mask_time_indices = compute_mask_indices((batch_size, sequence_length), mask_prob=self.mask_time_prob,
                                                     mask_length=self.mask_time_length, attention_mask=attention_mask,
                                                     min_masks=2)
            mask_time_indices = torch.tensor(mask_time_indices, device=hidden_states.device, dtype=torch.bool)
            hidden_states[mask_time_indices] = self.wav2vec2.masked_spec_embed.to(hidden_states.dtype)
        if self.mask_feature_prob > 0 and self.training:
            mask_feature_indices = compute_mask_indices((batch_size, hidden_size), mask_prob=self.mask_feature_prob,
                                                        mask_length=self.mask_feature_length, min_masks=1)
            mask_feature_indices = torch.tensor(mask_feature_indices, device=hidden_states.device, dtype=torch.bool)
            mask_feature_indices = mask_feature_indices[:, None].expand(-1, sequence_length, -1)
            hidden_states[mask_feature_indices] = 0
        return hidden_states, mask_time_indices

    def compute_pred(self, proj_x, target):
        # cosine similarity to every cluster embedding; the target's is the positive
        logits = torch.cosine_similarity(proj_x.float().unsqueeze(-2), self.label_embs_concat.float(), dim=-1)
        return logits.type_as(proj_x) / self.logit_temp, target

    def forward(self, input_values, attention_mask, target):
        base = self.wav2vec2
        extract_features = base.feature_extractor(input_values).transpose(1, 2)
        padding_mask = ~base._get_feature_vector_attention_mask(extract_features.shape[1], attention_mask)
        hidden_states = base.feature_projection(extract_features)
        hidden_states, mask_indices = self._mask_hidden_states(hidden_states, attention_mask=(~padding_mask).long())
        x = base.encoder(hidden_states, attention_mask=~padding_mask)

        masked_indices = torch.logical_and(~padding_mask, mask_indices)
        logit_m, target_m = self.compute_pred(self.final_proj(x[masked_indices]), target[masked_indices])  # BREAK: project every frame and weight the per-frame loss by the mask
        loss_m = F.cross_entropy(logit_m, target_m, reduction="sum")
        sample_size = masked_indices.sum()
        return loss_m / sample_size, sample_size


def build_hubert_masked_pred():
    seeded(1204)
    model = HubertPretrain()
    input_values = torch.randn(2, 400)
    attention_mask = torch.ones(2, 400, dtype=torch.long)
    attention_mask[1, 330:] = 0
    input_values[1, 330:] = 0.0
    target = torch.randint(0, 10, (2, 19))
    return model, (input_values, attention_mask, target)


# ------------------------------------------------------------------ deep-text-recognition-benchmark (VGG + CTC)


class CTCLabelConverter:
    """Between text labels and the recognizer's class indices (index 0 is the CTC blank)."""

    def __init__(self, character: str) -> None:
        self.dict = {char: i + 1 for i, char in enumerate(character)}
        self.character = ["[CTCblank]", *character]

    def encode(self, text, batch_max_length=8):
        length = [len(s) for s in text]
        batch_text = torch.LongTensor(len(text), batch_max_length).fill_(0)
        for i, t in enumerate(text):
            chars = [self.dict[char] for char in t]
            batch_text[i][: len(chars)] = torch.LongTensor(chars)
        return batch_text, torch.IntTensor(length)

    def decode(self, text_index, length):
        texts = []
        for index, n_steps in enumerate(length):
            t = text_index[index, :]
            char_list = []
            for i in range(n_steps):  # BREAK must-not: the decoded strings are built on the host from the argmax path
                if t[i] != 0 and (not (i > 0 and t[i - 1] == t[i])):  # removing repeated characters and blank.
                    char_list.append(self.character[t[i]])
            texts.append("".join(char_list))
        return texts


class VGGFeatureExtractor(nn.Module):
    def __init__(self, input_channel=1, output_channel=16):
        super().__init__()
        oc = [output_channel // 4, output_channel // 2, output_channel]
        self.ConvNet = nn.Sequential(
            nn.Conv2d(input_channel, oc[0], 3, 1, 1), nn.ReLU(True), nn.MaxPool2d(2, 2),
            nn.Conv2d(oc[0], oc[1], 3, 1, 1), nn.ReLU(True), nn.MaxPool2d(2, 2),
            nn.Conv2d(oc[1], oc[2], 3, 1, 1, bias=False), nn.BatchNorm2d(oc[2]), nn.ReLU(True),
            nn.MaxPool2d((2, 1), (2, 1)),
        )

    def forward(self, x):
        return self.ConvNet(x)


class Recognizer(nn.Module):
    def __init__(self, num_class, output_channel=16):
        super().__init__()
        self.FeatureExtraction = VGGFeatureExtractor(1, output_channel)
        self.AdaptiveAvgPool = nn.AdaptiveAvgPool2d((None, 1))
        self.Prediction = nn.Linear(output_channel, num_class)

    def forward(self, image):
        visual_feature = self.FeatureExtraction(image)
        visual_feature = self.AdaptiveAvgPool(visual_feature.permute(0, 3, 1, 2)).squeeze(3)
        return self.Prediction(visual_feature.contiguous())


def edit_distance(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


class CTCValidation(nn.Module):
    """One validation batch of ``test.py``'s ``validation``: CTC cost, greedy decode, accuracy and norm_ED."""

    def __init__(self, character="0123456789", batch_max_length=8):
        super().__init__()
        self.converter = CTCLabelConverter(character)
        self.model = Recognizer(len(self.converter.character))
        self.criterion = nn.CTCLoss(zero_infinity=True)
        self.batch_max_length = batch_max_length

    def forward(self, image, labels):
        batch_size = image.size(0)
        text_for_loss, length_for_loss = self.converter.encode(labels, batch_max_length=self.batch_max_length)
        preds = self.model(image)
        preds_size = torch.IntTensor([preds.size(1)] * batch_size)
        cost = self.criterion(preds.log_softmax(2).permute(1, 0, 2), text_for_loss, preds_size, length_for_loss)
        _, preds_index = preds.max(2)
        preds_str = self.converter.decode(preds_index.data, preds_size.data)
        n_correct = 0
        norm_ed = 0.0
        for gt, pred in zip(labels, preds_str, strict=True):
            if pred == gt:
                n_correct += 1
            if len(gt) == 0 or len(pred) == 0:
                norm_ed += 0
            elif len(gt) > len(pred):
                norm_ed += 1 - edit_distance(pred, gt) / len(gt)
            else:
                norm_ed += 1 - edit_distance(pred, gt) / len(pred)
        return cost, preds_str, n_correct / batch_size * 100, norm_ed / batch_size


def build_ocr_ctc():
    seeded(1205)
    model = CTCValidation()
    labels = ["3071", "52", "9846"]
    image = torch.rand(3, 1, 16, 40)
    return model, (image, labels)

"""Machine translation: facebookresearch/fairseq's ``TransformerModel`` training step (0.12: the encoder's
``has_pads`` weighing the padded embeddings and choosing the layers' padding mask, the decoder's ``self_attn_padding_mask`` only when the
previous output tokens hold padding, ``buffered_future_mask``, fairseq's ``MultiheadAttention`` on T x B x C) under
``LabelSmoothedCrossEntropyCriterion`` with ``report_accuracy`` (``label_smoothed_nll_loss`` with the pad as
``ignore_index``, ``compute_accuracy`` by ``masked_select``, the counts stored with ``utils.item``)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import helpers as utils
from .helpers import seeded


def make_positions(tensor, padding_idx: int):
    """Replace non-padding symbols with their position numbers (starting at padding_idx + 1)."""
    mask = tensor.ne(padding_idx).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx


def fill_with_neg_inf(t):
    """FP16-compatible function that fills a tensor with -inf."""
    return t.float().fill_(float("-inf")).type_as(t)


class LearnedPositionalEmbedding(nn.Embedding):
    def __init__(self, num_embeddings, embedding_dim, padding_idx):
        super().__init__(num_embeddings, embedding_dim, padding_idx)
        self.max_positions = self.num_embeddings - self.padding_idx - 1

    def forward(self, input):
        positions = make_positions(input, self.padding_idx)
        return F.embedding(positions, self.weight, self.padding_idx)


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None):
        tgt_len, bsz, embed_dim = query.size()
        src_len = key.size(0)
        q = self.q_proj(query) * self.scaling
        k = self.k_proj(key)
        v = self.v_proj(value)
        q = q.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = k.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        v = v.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)

        attn_weights = torch.bmm(q, k.transpose(1, 2))
        assert list(attn_weights.size()) == [bsz * self.num_heads, tgt_len, src_len]

        if attn_mask is not None:
            attn_mask = attn_mask.unsqueeze(0)
            attn_weights += attn_mask

        if key_padding_mask is not None:
            # don't attend to padding symbols
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
            attn_weights = attn_weights.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2).to(torch.bool), float("-inf"))
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)

        attn_weights_float = F.softmax(attn_weights, dim=-1, dtype=torch.float32)
        attn_probs = attn_weights_float.type_as(attn_weights)
        attn = torch.bmm(attn_probs, v)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        attn = self.out_proj(attn)
        return attn, None


class TransformerEncoderLayer(nn.Module):
    def __init__(self, embed_dim=16, ffn_dim=32, heads=2):
        super().__init__()
        self.self_attn = MultiheadAttention(embed_dim, heads)
        self.self_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, embed_dim)
        self.final_layer_norm = nn.LayerNorm(embed_dim)

    def forward(self, x, encoder_padding_mask):
        residual = x
        x, _ = self.self_attn(query=x, key=x, value=x, key_padding_mask=encoder_padding_mask)
        x = self.self_attn_layer_norm(residual + x)
        residual = x
        x = self.fc2(F.relu(self.fc1(x)))
        x = self.final_layer_norm(residual + x)
        return x


class TransformerDecoderLayer(nn.Module):
    def __init__(self, embed_dim=16, ffn_dim=32, heads=2):
        super().__init__()
        self.self_attn = MultiheadAttention(embed_dim, heads)
        self.self_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.encoder_attn = MultiheadAttention(embed_dim, heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, embed_dim)
        self.final_layer_norm = nn.LayerNorm(embed_dim)

    def forward(self, x, encoder_out, encoder_padding_mask, self_attn_mask=None, self_attn_padding_mask=None):
        residual = x
        x, _ = self.self_attn(query=x, key=x, value=x, key_padding_mask=self_attn_padding_mask, attn_mask=self_attn_mask)
        x = self.self_attn_layer_norm(residual + x)
        residual = x
        x, attn = self.encoder_attn(query=x, key=encoder_out, value=encoder_out, key_padding_mask=encoder_padding_mask)
        x = self.encoder_attn_layer_norm(residual + x)
        residual = x
        x = self.fc2(F.relu(self.fc1(x)))
        x = self.final_layer_norm(residual + x)
        return x, attn


class TransformerEncoder(nn.Module):
    def __init__(self, embed_tokens, padding_idx, num_layers=1):
        super().__init__()
        embed_dim = embed_tokens.embedding_dim
        self.padding_idx = padding_idx
        self.embed_tokens = embed_tokens
        self.embed_scale = math.sqrt(embed_dim)
        self.embed_positions = LearnedPositionalEmbedding(32, embed_dim, padding_idx)
        self.layers = nn.ModuleList([TransformerEncoderLayer(embed_dim) for _ in range(num_layers)])

    def forward_embedding(self, src_tokens, token_embedding=None):
        # embed tokens and positions
        if token_embedding is None:
            token_embedding = self.embed_tokens(src_tokens)
        x = embed = self.embed_scale * token_embedding
        if self.embed_positions is not None:
            x = embed + self.embed_positions(src_tokens)
        return x, embed

    def forward(self, src_tokens, src_lengths=None, return_all_hiddens: bool = False, token_embeddings=None):
        # compute padding mask
        encoder_padding_mask = src_tokens.eq(self.padding_idx)
        has_pads = src_tokens.device.type == "xla" or encoder_padding_mask.any()

        x, encoder_embedding = self.forward_embedding(src_tokens, token_embeddings)

        # account for padding while computing the representation
        x = x * (1 - encoder_padding_mask.unsqueeze(-1).type_as(x) * has_pads.type_as(x))

        # B x T x C -> T x B x C
        x = x.transpose(0, 1)

        # encoder layers
        for layer in self.layers:
            x = layer(x, encoder_padding_mask=encoder_padding_mask if has_pads else None)  # BREAK: pass encoder_padding_mask itself: without pads it is all False and masks nothing

        return {
            "encoder_out": [x],  # T x B x C
            "encoder_padding_mask": [encoder_padding_mask],  # B x T
            "encoder_embedding": [encoder_embedding],  # B x T x C
            "src_tokens": [],
            "src_lengths": [],
        }


class TransformerDecoder(nn.Module):
    def __init__(self, embed_tokens, padding_idx, num_layers=1):
        super().__init__()
        embed_dim = embed_tokens.embedding_dim
        self.padding_idx = padding_idx
        self.embed_tokens = embed_tokens
        self.embed_scale = math.sqrt(embed_dim)
        self.embed_positions = LearnedPositionalEmbedding(32, embed_dim, padding_idx)
        self.layers = nn.ModuleList([TransformerDecoderLayer(embed_dim) for _ in range(num_layers)])
        self.cross_self_attention = False
        self._future_mask = torch.empty(0)
        self.output_projection = nn.Linear(embed_dim, embed_tokens.num_embeddings, bias=False)
        self.output_projection.weight = self.embed_tokens.weight

    def buffered_future_mask(self, tensor):
        dim = tensor.size(0)
        # self._future_mask.device != tensor.device is not working in TorchScript. This is a workaround.
        if self._future_mask.size(0) == 0 or (not self._future_mask.device == tensor.device) or self._future_mask.size(0) < dim:
            self._future_mask = torch.triu(fill_with_neg_inf(torch.zeros([dim, dim])), 1)
        self._future_mask = self._future_mask.to(tensor)
        return self._future_mask[:dim, :dim]

    def extract_features(self, prev_output_tokens, encoder_out):
        # embed positions
        positions = self.embed_positions(prev_output_tokens)

        # embed tokens and positions
        x = self.embed_scale * self.embed_tokens(prev_output_tokens)
        x += positions

        # B x T x C -> T x B x C
        x = x.transpose(0, 1)

        self_attn_padding_mask = None
        if self.cross_self_attention or prev_output_tokens.eq(self.padding_idx).any():  # BREAK: always pass prev_output_tokens.eq(pad) as the key padding mask: an all-False mask leaves the softmax as it was
            self_attn_padding_mask = prev_output_tokens.eq(self.padding_idx)

        # decoder layers
        attn = None
        inner_states = [x]
        for layer in self.layers:
            self_attn_mask = self.buffered_future_mask(x)
            x, layer_attn = layer(x, encoder_out["encoder_out"][0], encoder_out["encoder_padding_mask"][0],
                                  self_attn_mask=self_attn_mask, self_attn_padding_mask=self_attn_padding_mask)
            inner_states.append(x)

        # T x B x C -> B x T x C
        x = x.transpose(0, 1)
        return x, {"attn": [attn], "inner_states": inner_states}

    def forward(self, prev_output_tokens, encoder_out):
        x, extra = self.extract_features(prev_output_tokens, encoder_out)
        x = self.output_projection(x)
        return x, extra


class TransformerModel(nn.Module):
    def __init__(self, vocab=20, embed_dim=16, padding_idx=1):
        super().__init__()
        self.padding_idx = padding_idx
        self.encoder = TransformerEncoder(nn.Embedding(vocab, embed_dim, padding_idx), padding_idx)
        self.decoder = TransformerDecoder(nn.Embedding(vocab, embed_dim, padding_idx), padding_idx)

    def forward(self, src_tokens, src_lengths, prev_output_tokens):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths)
        decoder_out = self.decoder(prev_output_tokens, encoder_out=encoder_out)
        return decoder_out

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        logits = net_output[0].float()
        if log_probs:
            return F.log_softmax(logits, dim=-1)
        return F.softmax(logits, dim=-1)

    def get_targets(self, sample, net_output):
        return sample["target"]


def label_smoothed_nll_loss(lprobs, target, epsilon, ignore_index=None, reduce=True):
    if target.dim() == lprobs.dim() - 1:
        target = target.unsqueeze(-1)
    nll_loss = -lprobs.gather(dim=-1, index=target)
    smooth_loss = -lprobs.sum(dim=-1, keepdim=True)
    if ignore_index is not None:
        pad_mask = target.eq(ignore_index)
        nll_loss.masked_fill_(pad_mask, 0.0)
        smooth_loss.masked_fill_(pad_mask, 0.0)
    else:
        nll_loss = nll_loss.squeeze(-1)
        smooth_loss = smooth_loss.squeeze(-1)
    if reduce:
        nll_loss = nll_loss.sum()
        smooth_loss = smooth_loss.sum()
    eps_i = epsilon / (lprobs.size(-1) - 1)
    loss = (1.0 - epsilon - eps_i) * nll_loss + eps_i * smooth_loss
    return loss, nll_loss


class LabelSmoothedCrossEntropyCriterion(nn.Module):
    def __init__(self, model, padding_idx, sentence_avg=False, label_smoothing=0.1, ignore_prefix_size=0, report_accuracy=True):
        super().__init__()
        self.model = model
        self.padding_idx = padding_idx
        self.sentence_avg = sentence_avg
        self.eps = label_smoothing
        self.ignore_prefix_size = ignore_prefix_size
        self.report_accuracy = report_accuracy

    def forward(self, sample, reduce=True):
        """Compute the loss for the given sample.

        Returns a tuple with three elements:
        1) the loss
        2) the sample size, which is used as the denominator for the gradient
        3) logging outputs to display while training
        """
        model = self.model
        net_output = model(**sample["net_input"])
        loss, nll_loss = self.compute_loss(model, net_output, sample, reduce=reduce)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll_loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        if self.report_accuracy:
            n_correct, total = self.compute_accuracy(model, net_output, sample)
            logging_output["n_correct"] = utils.item(n_correct.data)
            logging_output["total"] = utils.item(total.data)
        return loss, sample_size, logging_output

    def get_lprobs_and_target(self, model, net_output, sample):
        lprobs = model.get_normalized_probs(net_output, log_probs=True)
        target = model.get_targets(sample, net_output)
        if self.ignore_prefix_size > 0:
            # lprobs: B x T x C
            lprobs = lprobs[:, self.ignore_prefix_size :, :].contiguous()
            target = target[:, self.ignore_prefix_size :].contiguous()
        return lprobs.view(-1, lprobs.size(-1)), target.view(-1)

    def compute_loss(self, model, net_output, sample, reduce=True):
        lprobs, target = self.get_lprobs_and_target(model, net_output, sample)
        loss, nll_loss = label_smoothed_nll_loss(lprobs, target, self.eps, ignore_index=self.padding_idx, reduce=reduce)
        return loss, nll_loss

    def compute_accuracy(self, model, net_output, sample):
        lprobs, target = self.get_lprobs_and_target(model, net_output, sample)
        mask = target.ne(self.padding_idx)
        n_correct = torch.sum(lprobs.argmax(1).masked_select(mask).eq(target.masked_select(mask)))  # BREAK: count the hits under the mask in place: (argmax == target) & mask, summed
        total = torch.sum(mask)
        return n_correct, total


def build_fairseq_translation_step():
    seeded(1509)
    pad, eos = 1, 2
    # LanguagePairDataset's collater: sources left-padded, targets right-padded, prev_output_tokens = eos + target[:-1]
    src_tokens = torch.tensor([[5, 9, 4, 12, 7, eos], [pad, pad, 6, 15, 3, eos], [pad, 8, 10, 4, 11, eos]])
    target = torch.tensor([[13, 6, 17, 4, eos], [9, 5, eos, pad, pad], [7, 14, 3, eos, pad]])
    prev_output_tokens = torch.tensor([[eos, 13, 6, 17, 4], [eos, 9, 5, pad, pad], [eos, 7, 14, 3, pad]])
    sample = {
        "net_input": {"src_tokens": src_tokens, "src_lengths": torch.tensor([6, 4, 5]), "prev_output_tokens": prev_output_tokens},
        "target": target,
        "ntokens": 12,
    }
    criterion = LabelSmoothedCrossEntropyCriterion(TransformerModel(padding_idx=pad).train(), padding_idx=pad)
    return criterion, (sample,)

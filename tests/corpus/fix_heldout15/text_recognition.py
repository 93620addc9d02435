"""Scene text recognition: open-mmlab/mmocr's SAR (0.x ``SARNet.simple_test``: a small ResNet-style backbone,
``SAREncoder``'s two-layer ``nn.LSTM`` over the column max-pooled features with the valid ratio picking each image's
holistic feature, ``ParallelSARDecoder.forward_test`` feeding its arg-max back into the decoder LSTM and the 2D
attention masked past each image's valid width, and ``AttnConvertor.tensor2idx`` / ``idx2str`` turning the scores into
strings on the host)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded


class SAREncoder(nn.Module):
    """Implementation of encoder module in `SAR <https://arxiv.org/abs/1811.00751>`_."""

    def __init__(self, enc_bi_rnn=False, enc_do_rnn=0.0, enc_gru=False, d_model=16, d_enc=16, mask=True):
        super().__init__()
        self.enc_bi_rnn = enc_bi_rnn
        self.enc_do_rnn = enc_do_rnn
        self.mask = mask

        # LSTM Encoder
        kwargs = dict(input_size=d_model, hidden_size=d_enc, num_layers=2, batch_first=True, dropout=enc_do_rnn, bidirectional=enc_bi_rnn)
        if enc_gru:
            self.rnn_encoder = nn.GRU(**kwargs)
        else:
            self.rnn_encoder = nn.LSTM(**kwargs)

        # global feature transformation
        encoder_rnn_out_size = d_enc * (int(enc_bi_rnn) + 1)
        self.linear = nn.Linear(encoder_rnn_out_size, encoder_rnn_out_size)

    def forward(self, feat, img_metas=None):
        if img_metas is not None:
            assert len(img_metas) == feat.size(0)

        valid_ratios = None
        if img_metas is not None:
            valid_ratios = [img_meta.get("valid_ratio", 1.0) for img_meta in img_metas] if self.mask else None

        h_feat = feat.size(2)
        feat_v = F.max_pool2d(feat, kernel_size=(h_feat, 1), stride=1, padding=0)
        feat_v = feat_v.squeeze(2)  # bsz * C * W
        feat_v = feat_v.permute(0, 2, 1).contiguous()  # bsz * W * C

        holistic_feat = self.rnn_encoder(feat_v)[0]  # BREAK: Dynamo does not trace nn.LSTM: unroll the two layers over time with the module's own weights (gates in i, f, g, o order)

        if valid_ratios is not None:
            valid_hf = []
            T = holistic_feat.size(1)
            for i, valid_ratio in enumerate(valid_ratios):
                valid_step = min(T, math.ceil(T * valid_ratio)) - 1
                valid_hf.append(holistic_feat[i, valid_step, :])
            valid_hf = torch.stack(valid_hf, dim=0)
        else:
            valid_hf = holistic_feat[:, -1, :]  # bsz * C

        holistic_feat = self.linear(valid_hf)  # bsz * C

        return holistic_feat


class ParallelSARDecoder(nn.Module):
    """Implementation Parallel Decoder module in `SAR <https://arxiv.org/abs/1811.00751>`_."""

    def __init__(self, num_classes=12, enc_bi_rnn=False, dec_bi_rnn=False, dec_do_rnn=0.0, dec_gru=False, d_model=16,
                 d_enc=16, d_k=8, pred_dropout=0.0, max_seq_len=4, mask=True, start_idx=10, padding_idx=11, pred_concat=False):
        super().__init__()
        self.num_classes = num_classes
        self.enc_bi_rnn = enc_bi_rnn
        self.d_k = d_k
        self.start_idx = start_idx
        self.max_seq_len = max_seq_len
        self.mask = mask
        self.pred_concat = pred_concat
        self.train_mode = False

        encoder_rnn_out_size = d_enc * (int(enc_bi_rnn) + 1)
        decoder_rnn_out_size = encoder_rnn_out_size * (int(dec_bi_rnn) + 1)
        # 2D attention layer
        self.conv1x1_1 = nn.Linear(decoder_rnn_out_size, d_k)
        self.conv3x3_1 = nn.Conv2d(d_model, d_k, kernel_size=3, stride=1, padding=1)
        self.conv1x1_2 = nn.Linear(d_k, 1)

        # Decoder RNN layer
        kwargs = dict(input_size=encoder_rnn_out_size, hidden_size=encoder_rnn_out_size, num_layers=2, batch_first=True,
                      dropout=dec_do_rnn, bidirectional=dec_bi_rnn)
        if dec_gru:
            self.rnn_decoder = nn.GRU(**kwargs)
        else:
            self.rnn_decoder = nn.LSTM(**kwargs)

        # Decoder input embedding
        self.embedding = nn.Embedding(self.num_classes, encoder_rnn_out_size, padding_idx=padding_idx)

        # Prediction layer
        self.pred_dropout = nn.Dropout(pred_dropout)
        pred_num_classes = num_classes - 1  # ignore padding_idx in prediction
        if pred_concat:
            fc_in_channel = decoder_rnn_out_size + d_model + encoder_rnn_out_size
        else:
            fc_in_channel = d_model
        self.prediction = nn.Linear(fc_in_channel, pred_num_classes)

    def _2d_attention(self, decoder_input, feat, holistic_feat, valid_ratios=None):
        # y: bsz * (seq_len + 1) * hidden_size
        y = self.rnn_decoder(decoder_input)[0]  # BREAK: the decoder LSTM unrolled the same way over the (seq_len + 1) inputs

        attn_query = self.conv1x1_1(y)  # bsz * (seq_len + 1) * attn_size
        bsz, seq_len, attn_size = attn_query.size()
        attn_query = attn_query.view(bsz, seq_len, attn_size, 1, 1)

        attn_key = self.conv3x3_1(feat)
        # bsz * attn_size * h * w
        attn_key = attn_key.unsqueeze(1)
        # bsz * 1 * attn_size * h * w

        attn_weight = torch.tanh(torch.add(attn_key, attn_query, alpha=1))
        # bsz * (seq_len + 1) * attn_size * h * w
        attn_weight = attn_weight.permute(0, 1, 3, 4, 2).contiguous()
        # bsz * (seq_len + 1) * h * w * attn_size
        attn_weight = self.conv1x1_2(attn_weight)
        # bsz * (seq_len + 1) * h * w * 1
        bsz, T, h, w, c = attn_weight.size()
        assert c == 1

        if valid_ratios is not None:
            # cal mask of attention weight
            attn_mask = torch.zeros_like(attn_weight)
            for i, valid_ratio in enumerate(valid_ratios):
                valid_width = min(w, math.ceil(w * valid_ratio))
                attn_mask[i, :, :, valid_width:, :] = 1
            attn_weight = attn_weight.masked_fill(attn_mask.bool(), float("-inf"))

        attn_weight = attn_weight.view(bsz, T, -1)
        attn_weight = F.softmax(attn_weight, dim=-1)
        attn_weight = attn_weight.view(bsz, T, h, w, c).permute(0, 1, 4, 2, 3).contiguous()

        attn_feat = torch.sum(torch.mul(feat.unsqueeze(1), attn_weight), (3, 4), keepdim=False)
        # bsz * (seq_len + 1) * C

        # linear transformation
        if self.pred_concat:
            hf_c = holistic_feat.size(-1)
            holistic_feat = holistic_feat.expand(bsz, seq_len, hf_c)
            y = self.prediction(torch.cat((y, attn_feat, holistic_feat), 2))
        else:
            y = self.prediction(attn_feat)
        # bsz * (seq_len + 1) * num_classes
        if self.train_mode:
            y = self.pred_dropout(y)

        return y

    def forward_test(self, feat, out_enc, img_metas):
        valid_ratios = None
        if img_metas is not None and self.mask:
            valid_ratios = [img_meta.get("valid_ratio", 1.0) for img_meta in img_metas]

        seq_len = self.max_seq_len

        bsz = feat.size(0)
        start_token = torch.full((bsz,), self.start_idx, device=feat.device, dtype=torch.long)
        # bsz
        start_token = self.embedding(start_token)
        # bsz * emb_dim
        start_token = start_token.unsqueeze(1).expand(-1, seq_len, -1)
        # bsz * seq_len * emb_dim
        out_enc = out_enc.unsqueeze(1)
        # bsz * 1 * emb_dim
        decoder_input = torch.cat((out_enc, start_token), dim=1)
        # bsz * (seq_len + 1) * emb_dim

        outputs = []
        for i in range(1, seq_len + 1):
            decoder_output = self._2d_attention(decoder_input, feat, out_enc, valid_ratios=valid_ratios)
            char_output = decoder_output[:, i, :]  # bsz * num_classes
            char_output = F.softmax(char_output, -1)
            outputs.append(char_output)
            _, max_idx = torch.max(char_output, dim=1, keepdim=False)
            char_embedding = self.embedding(max_idx)  # bsz * emb_dim
            if i < seq_len:
                decoder_input[:, i + 1, :] = char_embedding

        outputs = torch.stack(outputs, 1)  # bsz * seq_len * num_classes

        return outputs


class AttnConvertor:
    """Convert between text, index and tensor for encoder-decoder based pipeline."""

    def __init__(self, dict_list="0123456789"):
        self.idx2char = list(dict_list)
        self.end_idx = len(self.idx2char) - 1 + 1  # '<BOS/EOS>' shares the start index
        self.idx2char.append("<BOS/EOS>")
        self.padding_idx = len(self.idx2char)
        self.idx2char.append("<PAD>")
        self.start_idx = self.end_idx

    def tensor2idx(self, outputs, img_metas=None):
        batch_size = outputs.size(0)
        ignore_indexes = [self.padding_idx]
        indexes, scores = [], []
        for idx in range(batch_size):
            seq = outputs[idx, :, :]
            max_value, max_idx = torch.max(seq, -1)
            str_index, str_score = [], []
            output_index = max_idx.cpu().detach().numpy().tolist()  # BREAK must-not: decoding stops at the end token: the index and score lists returned have data-dependent lengths by design
            output_score = max_value.cpu().detach().numpy().tolist()
            for char_index, char_score in zip(output_index, output_score, strict=True):
                if char_index in ignore_indexes:
                    continue
                if char_index == self.end_idx:
                    break
                str_index.append(char_index)
                str_score.append(char_score)

            indexes.append(str_index)
            scores.append(str_score)

        return indexes, scores

    def idx2str(self, indexes):
        strings = []
        for index in indexes:
            string = [self.idx2char[i] for i in index]
            strings.append("".join(string))
        return strings


class SARNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.label_convertor = AttnConvertor()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 16, 3, 1, 1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d((2, 1)))
        self.encoder = SAREncoder()
        self.decoder = ParallelSARDecoder(num_classes=len(self.label_convertor.idx2char), start_idx=self.label_convertor.start_idx,
                                          padding_idx=self.label_convertor.padding_idx)

    def extract_feat(self, img):
        return self.backbone(img)

    def forward(self, img, img_metas):
        """``single_gpu_test``'s call of the model: ``simple_test`` under ``torch.no_grad()``."""
        with torch.no_grad():
            return self.simple_test(img, img_metas)

    def simple_test(self, img, img_metas):
        feat = self.extract_feat(img)

        out_enc = None
        if self.encoder is not None:
            out_enc = self.encoder(feat, img_metas)

        out_dec = self.decoder.forward_test(feat, out_enc, img_metas)

        label_indexes, label_scores = self.label_convertor.tensor2idx(out_dec, img_metas)
        label_strings = self.label_convertor.idx2str(label_indexes)

        # flatten batch results
        results = []
        for string, score in zip(label_strings, label_scores, strict=True):
            results.append(dict(text=string, score=score))

        return results, out_dec


def build_mmocr_sar_test():
    seeded(1520)
    img_metas = [{"valid_ratio": 1.0, "filename": "word_1.png"}, {"valid_ratio": 0.75, "filename": "word_2.png"}]
    return SARNet().eval(), (torch.randn(2, 3, 8, 16), img_metas)

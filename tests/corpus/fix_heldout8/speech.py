"""Speech models: a FastSpeech 2 variance adaptor with its length regulator (training, ground-truth durations),
Tacotron 2's autoregressive decoder stopping on its gate, an RNN-T greedy search over an LSTM transcriber
fed with packed sequences, and an espnet2-style CTC model (conv subsampling + self-attention encoder)."""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import make_non_pad_mask, make_pad_mask, seeded

# --------------------------------------------------------------------------- FastSpeech 2 length regulator


def get_mask_from_lengths(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    batch_size = lengths.shape[0]
    if max_len is None:
        max_len = torch.max(lengths).item()

    ids = torch.arange(0, max_len).unsqueeze(0).expand(batch_size, -1)
    mask = ids >= lengths.unsqueeze(1).expand(-1, max_len)

    return mask


def pad(input_ele: list[torch.Tensor], mel_max_length: int | None = None) -> torch.Tensor:
    if mel_max_length:
        max_len = mel_max_length
    else:
        max_len = max([input_ele[i].size(0) for i in range(len(input_ele))])

    out_list = list()
    for batch in input_ele:
        if len(batch.shape) == 1:
            one_batch_padded = F.pad(batch, (0, max_len - batch.size(0)), "constant", 0.0)
        elif len(batch.shape) == 2:
            one_batch_padded = F.pad(batch, (0, 0, 0, max_len - batch.size(0)), "constant", 0.0)
        out_list.append(one_batch_padded)
    out_padded = torch.stack(out_list)
    return out_padded


class Conv(nn.Module):
    """Convolution over the time axis of a (B, T, C) tensor."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 1, padding: int = 0) -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size=kernel_size, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous().transpose(1, 2)
        x = self.conv(x)
        x = x.contiguous().transpose(1, 2)
        return x


class VariancePredictor(nn.Module):
    """Duration, Pitch and Energy Predictor"""

    def __init__(self, d_model: int, filter_size: int = 32, kernel: int = 3, dropout: float = 0.1) -> None:
        super().__init__()
        self.conv_layer = nn.Sequential(
            OrderedDict(
                [
                    ("conv1d_1", Conv(d_model, filter_size, kernel_size=kernel, padding=(kernel - 1) // 2)),
                    ("relu_1", nn.ReLU()),
                    ("layer_norm_1", nn.LayerNorm(filter_size)),
                    ("dropout_1", nn.Dropout(dropout)),
                    ("conv1d_2", Conv(filter_size, filter_size, kernel_size=kernel, padding=1)),
                    ("relu_2", nn.ReLU()),
                    ("layer_norm_2", nn.LayerNorm(filter_size)),
                    ("dropout_2", nn.Dropout(dropout)),
                ]
            )
        )
        self.linear_layer = nn.Linear(filter_size, 1)

    def forward(self, encoder_output: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        out = self.conv_layer(encoder_output)
        out = self.linear_layer(out)
        out = out.squeeze(-1)
        if mask is not None:
            out = out.masked_fill(mask, 0.0)
        return out


class LengthRegulator(nn.Module):
    """Length Regulator"""

    def LR(self, x, duration, max_len):
        output = list()
        mel_len = list()
        for batch, expand_target in zip(x, duration, strict=True):
            expanded = self.expand(batch, expand_target)
            output.append(expanded)
            mel_len.append(expanded.shape[0])

        if max_len is not None:
            output = pad(output, max_len)
        else:
            output = pad(output)

        return output, torch.LongTensor(mel_len).to(x.device)

    def expand(self, batch, predicted):
        out = list()

        for i, vec in enumerate(batch):
            expand_size = predicted[i].item()  # BREAK: alignment matrix from cumsum(duration), then bmm
            out.append(vec.expand(max(int(expand_size), 0), -1))
        out = torch.cat(out, 0)

        return out

    def forward(self, x, duration, max_len):
        output, mel_len = self.LR(x, duration, max_len)
        return output, mel_len


class ScaledDotProductAttention(nn.Module):
    def __init__(self, temperature: float) -> None:
        super().__init__()
        self.temperature = temperature
        self.softmax = nn.Softmax(dim=2)

    def forward(self, q, k, v, mask=None):
        attn = torch.bmm(q, k.transpose(1, 2))
        attn = attn / self.temperature
        if mask is not None:
            attn = attn.masked_fill(mask, -math.inf)
        attn = self.softmax(attn)
        output = torch.bmm(attn, v)
        return output, attn


class MultiHeadAttention(nn.Module):
    def __init__(self, n_head: int, d_model: int, d_k: int, d_v: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.n_head = n_head
        self.d_k = d_k
        self.d_v = d_v
        self.w_qs = nn.Linear(d_model, n_head * d_k)
        self.w_ks = nn.Linear(d_model, n_head * d_k)
        self.w_vs = nn.Linear(d_model, n_head * d_v)
        self.attention = ScaledDotProductAttention(temperature=math.sqrt(d_k))
        self.layer_norm = nn.LayerNorm(d_model)
        self.fc = nn.Linear(n_head * d_v, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, q, k, v, mask=None):
        d_k, d_v, n_head = self.d_k, self.d_v, self.n_head
        sz_b, len_q, _ = q.size()
        sz_b, len_k, _ = k.size()
        sz_b, len_v, _ = v.size()

        residual = q
        q = self.w_qs(q).view(sz_b, len_q, n_head, d_k)
        k = self.w_ks(k).view(sz_b, len_k, n_head, d_k)
        v = self.w_vs(v).view(sz_b, len_v, n_head, d_v)
        q = q.permute(2, 0, 1, 3).contiguous().view(-1, len_q, d_k)  # (n*b) x lq x dk
        k = k.permute(2, 0, 1, 3).contiguous().view(-1, len_k, d_k)  # (n*b) x lk x dk
        v = v.permute(2, 0, 1, 3).contiguous().view(-1, len_v, d_v)  # (n*b) x lv x dv

        mask = mask.repeat(n_head, 1, 1)  # (n*b) x .. x ..
        output, attn = self.attention(q, k, v, mask=mask)

        output = output.view(n_head, sz_b, len_q, d_v)
        output = output.permute(1, 2, 0, 3).contiguous().view(sz_b, len_q, -1)  # b x lq x (n*dv)
        output = self.dropout(self.fc(output))
        output = self.layer_norm(output + residual)
        return output, attn


class FFTBlock(nn.Module):
    """FFT Block"""

    def __init__(self, d_model: int, n_head: int, d_inner: int, dropout: float = 0.1) -> None:
        super().__init__()
        d_k = d_v = d_model // n_head
        self.slf_attn = MultiHeadAttention(n_head, d_model, d_k, d_v, dropout=dropout)
        self.pos_ffn = nn.Sequential(
            Conv(d_model, d_inner, kernel_size=3, padding=1), nn.ReLU(), Conv(d_inner, d_model, kernel_size=1)
        )
        self.ffn_norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, enc_input: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        slf_attn_mask = mask.unsqueeze(1).expand(-1, enc_input.size(1), -1)
        enc_output, _ = self.slf_attn(enc_input, enc_input, enc_input, mask=slf_attn_mask)
        enc_output = enc_output.masked_fill(mask.unsqueeze(-1), 0)
        enc_output = self.ffn_norm(self.dropout(self.pos_ffn(enc_output)) + enc_output)
        enc_output = enc_output.masked_fill(mask.unsqueeze(-1), 0)
        return enc_output


class FastSpeech2Lite(nn.Module):
    """Encoder, duration predictor, length regulator, decoder, mel projection (training forward)."""

    def __init__(self, n_vocab: int = 20, d_model: int = 32, n_mel: int = 16) -> None:
        super().__init__()
        self.src_word_emb = nn.Embedding(n_vocab, d_model, padding_idx=0)
        self.encoder = FFTBlock(d_model, 2, 64)
        self.duration_predictor = VariancePredictor(d_model)
        self.length_regulator = LengthRegulator()
        self.decoder = FFTBlock(d_model, 2, 64)
        self.mel_linear = nn.Linear(d_model, n_mel)

    def forward(self, texts, src_lens, max_src_len, mel_lens, max_mel_len, d_targets):
        src_masks = get_mask_from_lengths(src_lens, max_src_len)
        mel_masks = get_mask_from_lengths(mel_lens, max_mel_len)

        output = self.encoder(self.src_word_emb(texts), src_masks)
        log_d_predictions = self.duration_predictor(output, src_masks)
        output, mel_len = self.length_regulator(output, d_targets, max_mel_len)

        output = self.decoder(output, mel_masks)
        output = self.mel_linear(output)

        return output, log_d_predictions, src_masks, mel_masks, mel_len


class FastSpeech2Loss(nn.Module):
    """Mel + duration losses over the non-padded frames and tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.mse_loss = nn.MSELoss()
        self.mae_loss = nn.L1Loss()

    def forward(
        self, mel_targets, duration_targets, mel_predictions, log_duration_predictions, src_masks, mel_masks
    ):
        src_masks = ~src_masks
        mel_masks = ~mel_masks
        log_duration_targets = torch.log(duration_targets.float() + 1)
        log_duration_targets.requires_grad = False  # BREAK: drop it: the targets never require grad

        log_duration_predictions = log_duration_predictions.masked_select(src_masks)  # BREAK: masked mean
        log_duration_targets = log_duration_targets.masked_select(src_masks)  # BREAK: same (masked mean)
        mel_predictions = mel_predictions.masked_fill(~mel_masks.unsqueeze(-1), 0.0)

        mel_loss = self.mae_loss(mel_predictions, mel_targets)
        duration_loss = self.mse_loss(log_duration_predictions, log_duration_targets)
        return mel_loss + duration_loss, mel_loss, duration_loss


class FastSpeech2Step(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = FastSpeech2Lite()
        self.loss = FastSpeech2Loss()

    def forward(self, texts, src_lens, max_src_len, mels, mel_lens, max_mel_len, d_targets):
        output, log_d_predictions, src_masks, mel_masks, mel_len = self.model(
            texts, src_lens, max_src_len, mel_lens, max_mel_len, d_targets
        )
        total_loss, mel_loss, duration_loss = self.loss(
            mels, d_targets, output, log_d_predictions, src_masks, mel_masks
        )
        return total_loss, output, mel_len


def build_fastspeech_lr() -> tuple[nn.Module, tuple]:
    torch.manual_seed(800)
    model = FastSpeech2Step()
    g = seeded(801)
    src_lens = torch.tensor([7, 5, 6])
    real = ~get_mask_from_lengths(src_lens, 7)
    texts = torch.randint(1, 20, (3, 7), generator=g) * real
    d_targets = torch.randint(1, 4, (3, 7), generator=g) * real
    mel_lens = d_targets.sum(-1)
    max_mel_len = int(mel_lens.max())
    mels = (
        torch.randn(3, max_mel_len, 16, generator=g)
        * ~get_mask_from_lengths(mel_lens, max_mel_len)[..., None]
    )
    return model, (texts, src_lens, 7, mels, mel_lens, max_mel_len, d_targets)


# --------------------------------------------------------------------------- Tacotron 2 inference decoder


class LinearNorm(nn.Linear):
    def __init__(self, in_dim: int, out_dim: int, bias: bool = True, w_init_gain: str = "linear") -> None:
        super().__init__(in_dim, out_dim, bias=bias)
        nn.init.xavier_uniform_(self.weight, gain=nn.init.calculate_gain(w_init_gain))


class Prenet(nn.Module):
    def __init__(self, in_dim: int, sizes: list[int]) -> None:
        super().__init__()
        in_sizes = [in_dim] + sizes[:-1]
        self.layers = nn.ModuleList(
            [
                LinearNorm(in_size, out_size, bias=False)
                for (in_size, out_size) in zip(in_sizes, sizes, strict=True)
            ]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for linear in self.layers:
            x = F.dropout(F.relu(linear(x)), p=0.5, training=True)
        return x


class Attention(nn.Module):
    def __init__(self, attention_rnn_dim: int, embedding_dim: int, attention_dim: int) -> None:
        super().__init__()
        self.query_layer = LinearNorm(attention_rnn_dim, attention_dim, bias=False, w_init_gain="tanh")
        self.memory_layer = LinearNorm(embedding_dim, attention_dim, bias=False, w_init_gain="tanh")
        self.v = LinearNorm(attention_dim, 1, bias=False)
        self.score_mask_value = -float("inf")

    def get_alignment_energies(self, query: torch.Tensor, processed_memory: torch.Tensor) -> torch.Tensor:
        processed_query = self.query_layer(query.unsqueeze(1))
        energies = self.v(torch.tanh(processed_query + processed_memory))
        return energies.squeeze(-1)

    def forward(self, attention_hidden_state, memory, processed_memory, mask):
        alignment = self.get_alignment_energies(attention_hidden_state, processed_memory)
        if mask is not None:
            alignment = alignment.masked_fill(mask, self.score_mask_value)
        attention_weights = F.softmax(alignment, dim=1)
        attention_context = torch.bmm(attention_weights.unsqueeze(1), memory)
        attention_context = attention_context.squeeze(1)
        return attention_context, attention_weights


class Decoder(nn.Module):
    def __init__(
        self,
        n_mel_channels: int = 8,
        encoder_embedding_dim: int = 24,
        attention_rnn_dim: int = 32,
        decoder_rnn_dim: int = 32,
        prenet_dim: int = 16,
        attention_dim: int = 16,
        gate_threshold: float = 0.5,
        max_decoder_steps: int = 60,
    ) -> None:
        super().__init__()
        self.n_mel_channels = n_mel_channels
        self.encoder_embedding_dim = encoder_embedding_dim
        self.attention_rnn_dim = attention_rnn_dim
        self.decoder_rnn_dim = decoder_rnn_dim
        self.gate_threshold = gate_threshold
        self.max_decoder_steps = max_decoder_steps
        self.prenet = Prenet(n_mel_channels, [prenet_dim, prenet_dim])
        self.attention_rnn = nn.LSTMCell(prenet_dim + encoder_embedding_dim, attention_rnn_dim)
        self.attention_layer = Attention(attention_rnn_dim, encoder_embedding_dim, attention_dim)
        self.decoder_rnn = nn.LSTMCell(attention_rnn_dim + encoder_embedding_dim, decoder_rnn_dim, 1)
        self.linear_projection = LinearNorm(decoder_rnn_dim + encoder_embedding_dim, n_mel_channels)
        self.gate_layer = LinearNorm(
            decoder_rnn_dim + encoder_embedding_dim, 1, bias=True, w_init_gain="sigmoid"
        )

    def get_go_frame(self, memory: torch.Tensor) -> torch.Tensor:
        return memory.new_zeros(memory.size(0), self.n_mel_channels)

    def initialize_decoder_states(self, memory: torch.Tensor, mask: torch.Tensor | None) -> None:
        B = memory.size(0)
        self.attention_hidden = memory.new_zeros(B, self.attention_rnn_dim)
        self.attention_cell = memory.new_zeros(B, self.attention_rnn_dim)
        self.decoder_hidden = memory.new_zeros(B, self.decoder_rnn_dim)
        self.decoder_cell = memory.new_zeros(B, self.decoder_rnn_dim)
        self.attention_context = memory.new_zeros(B, self.encoder_embedding_dim)
        self.memory = memory
        self.processed_memory = self.attention_layer.memory_layer(memory)
        self.mask = mask

    def parse_decoder_outputs(self, mel_outputs, gate_outputs, alignments):
        alignments = torch.stack(alignments).transpose(0, 1)
        gate_outputs = torch.stack(gate_outputs).transpose(0, 1).contiguous()
        mel_outputs = torch.stack(mel_outputs).transpose(0, 1).contiguous()
        mel_outputs = mel_outputs.view(mel_outputs.size(0), -1, self.n_mel_channels)
        mel_outputs = mel_outputs.transpose(1, 2)
        return mel_outputs, gate_outputs, alignments

    def decode(self, decoder_input: torch.Tensor):
        cell_input = torch.cat((decoder_input, self.attention_context), -1)
        self.attention_hidden, self.attention_cell = self.attention_rnn(
            cell_input, (self.attention_hidden, self.attention_cell)
        )
        self.attention_context, attention_weights = self.attention_layer(
            self.attention_hidden, self.memory, self.processed_memory, self.mask
        )
        decoder_input = torch.cat((self.attention_hidden, self.attention_context), -1)
        self.decoder_hidden, self.decoder_cell = self.decoder_rnn(
            decoder_input, (self.decoder_hidden, self.decoder_cell)
        )
        decoder_hidden_attention_context = torch.cat((self.decoder_hidden, self.attention_context), dim=1)
        decoder_output = self.linear_projection(decoder_hidden_attention_context)
        gate_prediction = self.gate_layer(decoder_hidden_attention_context)
        return decoder_output, gate_prediction, attention_weights

    def inference(self, memory: torch.Tensor):
        decoder_input = self.get_go_frame(memory)
        self.initialize_decoder_states(memory, mask=None)

        mel_outputs, gate_outputs, alignments = [], [], []
        while True:
            decoder_input = self.prenet(decoder_input)
            mel_output, gate_output, alignment = self.decode(decoder_input)

            mel_outputs += [mel_output.squeeze(1)]
            gate_outputs += [gate_output]
            alignments += [alignment]

            if torch.sigmoid(gate_output.data) > self.gate_threshold:  # BREAK must-not: gate ends the output
                break
            elif len(mel_outputs) == self.max_decoder_steps:
                print("Warning! Reached max decoder steps")
                break

            decoder_input = mel_output

        return self.parse_decoder_outputs(mel_outputs, gate_outputs, alignments)


class Tacotron2Lite(nn.Module):
    def __init__(self, n_symbols: int = 24, embedding_dim: int = 24) -> None:
        super().__init__()
        self.embedding = nn.Embedding(n_symbols, embedding_dim)
        self.encoder_convs = nn.Sequential(
            nn.Conv1d(embedding_dim, embedding_dim, 5, padding=2),
            nn.BatchNorm1d(embedding_dim),
            nn.ReLU(),
            nn.Conv1d(embedding_dim, embedding_dim, 5, padding=2),
            nn.BatchNorm1d(embedding_dim),
            nn.ReLU(),
        )
        self.encoder_proj = nn.Linear(embedding_dim, embedding_dim)
        self.decoder = Decoder(encoder_embedding_dim=embedding_dim)

    def inference(self, inputs: torch.Tensor):
        embedded_inputs = self.embedding(inputs).transpose(1, 2)
        x = self.encoder_convs(embedded_inputs).transpose(1, 2)
        encoder_outputs = torch.tanh(self.encoder_proj(x))
        mel_outputs, gate_outputs, alignments = self.decoder.inference(encoder_outputs)
        return mel_outputs, gate_outputs, alignments

    forward = inference


def build_tacotron_stop() -> tuple[nn.Module, tuple]:
    torch.manual_seed(810)
    model = Tacotron2Lite().eval()
    with torch.no_grad():  # a gate that fires after about ten frames, like a trained model's on a short text
        model.decoder.gate_layer.weight.mul_(10.0)
        model.decoder.gate_layer.bias.fill_(-2.195)
    text = torch.randint(1, 24, (1, 9), generator=seeded(811))
    return model, (text,)


# --------------------------------------------------------------------------- RNN-T greedy search


class TransducerEncoder(nn.Module):
    """A small self-attention transcriber (the espnet transducer encoder without subsampling)."""

    def __init__(self, idim: int = 10, odim: int = 16, num_blocks: int = 1) -> None:
        super().__init__()
        self.embed = nn.Linear(idim, odim)
        self.encoders = nn.ModuleList([EncoderLayer(odim) for _ in range(num_blocks)])

    def forward(self, xs_pad: torch.Tensor, ilens: torch.Tensor):
        masks = make_non_pad_mask(ilens).unsqueeze(1)
        xs = self.embed(xs_pad)
        for layer in self.encoders:
            xs, masks = layer(xs, masks)
        return xs, masks.squeeze(1).sum(1)


class RNNPredictor(nn.Module):
    def __init__(self, vocab: int, dim: int, blank_id: int = 0) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=blank_id)
        self.lstm = nn.LSTMCell(dim, dim)

    def init_state(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.embed.weight
        return w.new_zeros(batch, self.lstm.hidden_size), w.new_zeros(batch, self.lstm.hidden_size)

    def score(self, hyp: Hypothesis, cache: dict):
        key = "_".join(map(str, hyp.yseq))
        if key in cache:
            return cache[key]
        label = torch.full((1,), hyp.yseq[-1], dtype=torch.long)
        h, c = self.lstm(self.embed(label), hyp.dec_state)
        cache[key] = (h[0], (h, c), None)
        return cache[key]


class JointNetwork(nn.Module):
    def __init__(self, vocab: int, enc_dim: int, dec_dim: int, joint_dim: int = 32) -> None:
        super().__init__()
        self.lin_enc = nn.Linear(enc_dim, joint_dim)
        self.lin_dec = nn.Linear(dec_dim, joint_dim, bias=False)
        self.lin_out = nn.Linear(joint_dim, vocab)

    def forward(self, enc_out: torch.Tensor, dec_out: torch.Tensor) -> torch.Tensor:
        return self.lin_out(torch.tanh(self.lin_enc(enc_out) + self.lin_dec(dec_out)))


@dataclass
class Hypothesis:
    score: float
    yseq: list[int]
    dec_state: tuple[torch.Tensor, torch.Tensor] | None = None
    lm_state: dict = field(default_factory=dict)


class TransducerGreedy(nn.Module):
    def __init__(self, vocab: int = 12, blank_id: int = 0) -> None:
        super().__init__()
        self.blank_id = blank_id
        self.encoder = TransducerEncoder(odim=16)
        self.decoder = RNNPredictor(vocab, 16, blank_id)
        self.joint_network = JointNetwork(vocab, 16, 16)

    def greedy_search(self, enc_out: torch.Tensor) -> list[Hypothesis]:
        dec_state = self.decoder.init_state(1)
        hyp = Hypothesis(score=0.0, yseq=[self.blank_id], dec_state=dec_state)
        cache: dict = {}
        dec_out, state, _ = self.decoder.score(hyp, cache)

        for enc_out_t in enc_out:
            logp = torch.log_softmax(self.joint_network(enc_out_t, dec_out), dim=-1)
            top_logp, pred = torch.max(logp, dim=-1)

            if pred != self.blank_id:  # BREAK must-not: each emitted token drives the predictor
                hyp.yseq.append(int(pred))
                hyp.score += float(top_logp)
                hyp.dec_state = state
                dec_out, state, _ = self.decoder.score(hyp, cache)
        return [hyp]

    def forward(self, speech: torch.Tensor, speech_lengths: torch.Tensor):
        with torch.no_grad():
            enc_out, enc_lens = self.encoder(speech, speech_lengths)
            best = self.greedy_search(enc_out[0])[0]
        return best.yseq[1:], best.score, enc_lens


def build_rnnt_greedy() -> tuple[nn.Module, tuple]:
    torch.manual_seed(820)
    model = TransducerGreedy().eval()
    with torch.no_grad():
        model.joint_network.lin_out.bias[0] += 0.4
    speech = torch.randn(1, 14, 10, generator=seeded(821))
    return model, (speech, torch.tensor([14]))


# --------------------------------------------------------------------------- espnet2 CTC model


class Conv2dSubsampling(nn.Module):
    """Convolutional 2D subsampling (to 1/4 length)."""

    def __init__(self, idim: int, odim: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, odim, 3, 2), nn.ReLU(), nn.Conv2d(odim, odim, 3, 2), nn.ReLU())
        self.out = nn.Linear(odim * (((idim - 1) // 2 - 1) // 2), odim)

    def forward(self, x: torch.Tensor, x_mask: torch.Tensor):
        x = x.unsqueeze(1)  # (b, c, t, f)
        x = self.conv(x)
        b, c, t, f = x.size()
        x = self.out(x.transpose(1, 2).contiguous().view(b, t, c * f))
        return x, x_mask[:, :, :-2:2][:, :, :-2:2]


class MultiHeadedAttention(nn.Module):
    def __init__(self, n_head: int, n_feat: int) -> None:
        super().__init__()
        self.d_k = n_feat // n_head
        self.h = n_head
        self.linear_q = nn.Linear(n_feat, n_feat)
        self.linear_k = nn.Linear(n_feat, n_feat)
        self.linear_v = nn.Linear(n_feat, n_feat)
        self.linear_out = nn.Linear(n_feat, n_feat)

    def forward(self, query, key, value, mask):
        n_batch = query.size(0)
        q = self.linear_q(query).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        k = self.linear_k(key).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(value).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        mask = mask.unsqueeze(1).eq(0)  # (batch, 1, *, time2)
        min_value = torch.finfo(scores.dtype).min
        scores = scores.masked_fill(mask, min_value)
        attn = torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
        x = torch.matmul(attn, v).transpose(1, 2).contiguous().view(n_batch, -1, self.h * self.d_k)
        return self.linear_out(x)


class EncoderLayer(nn.Module):
    def __init__(self, size: int, n_head: int = 2) -> None:
        super().__init__()
        self.self_attn = MultiHeadedAttention(n_head, size)
        self.feed_forward = nn.Sequential(nn.Linear(size, 2 * size), nn.ReLU(), nn.Linear(2 * size, size))
        self.norm1 = nn.LayerNorm(size)
        self.norm2 = nn.LayerNorm(size)

    def forward(self, x, mask):
        residual = x
        x = self.norm1(x)
        x = residual + self.self_attn(x, x, x, mask)
        residual = x
        x = residual + self.feed_forward(self.norm2(x))
        return x, mask


class TransformerEncoder(nn.Module):
    def __init__(self, input_size: int, output_size: int = 24, num_blocks: int = 2) -> None:
        super().__init__()
        self.embed = Conv2dSubsampling(input_size, output_size)
        self.encoders = nn.ModuleList([EncoderLayer(output_size) for _ in range(num_blocks)])
        self.after_norm = nn.LayerNorm(output_size)

    def forward(self, xs_pad: torch.Tensor, ilens: torch.Tensor):
        masks = (~make_pad_mask(ilens)[:, None, :]).to(xs_pad.device)
        xs_pad, masks = self.embed(xs_pad, masks)
        for layer in self.encoders:
            xs_pad, masks = layer(xs_pad, masks)
        xs_pad = self.after_norm(xs_pad)
        olens = masks.squeeze(1).sum(1)
        return xs_pad, olens


class CTC(nn.Module):
    def __init__(self, odim: int, encoder_output_size: int, dropout_rate: float = 0.0, reduce: bool = True):
        super().__init__()
        self.dropout_rate = dropout_rate
        self.ctc_lo = nn.Linear(encoder_output_size, odim)
        self.ctc_loss = nn.CTCLoss(reduction="none", zero_infinity=True)
        self.reduce = reduce

    def loss_fn(self, th_pred, th_target, th_ilen, th_olen) -> torch.Tensor:
        th_pred = th_pred.log_softmax(2)
        loss = self.ctc_loss(th_pred, th_target, th_ilen, th_olen)
        size = th_pred.size(1)
        if self.reduce:
            loss = loss.sum() / size
        else:
            loss = loss / size
        return loss

    def forward(self, hs_pad, hlens, ys_pad, ys_lens):
        # hs_pad: (B, L, NProj) -> ys_hat: (B, L, Nvocab)
        ys_hat = self.ctc_lo(F.dropout(hs_pad, p=self.dropout_rate))
        # ys_hat: (B, L, D) -> (L, B, D)
        ys_hat = ys_hat.transpose(0, 1)
        # (B, L) -> (BxL,)
        ys_true = torch.cat([ys_pad[i, :n] for i, n in enumerate(ys_lens)])  # BREAK: pass the padded ys
        loss = self.loss_fn(ys_hat, ys_true, hlens, ys_lens).to(device=hs_pad.device, dtype=hs_pad.dtype)
        return loss


class ESPnetCTCModel(nn.Module):
    def __init__(self, vocab_size: int = 10, input_size: int = 20) -> None:
        super().__init__()
        self.encoder = TransformerEncoder(input_size)
        self.ctc = CTC(vocab_size, 24)

    def forward(self, speech, speech_lengths, text, text_lengths):
        encoder_out, encoder_out_lens = self.encoder(speech, speech_lengths)
        loss_ctc = self.ctc(encoder_out, encoder_out_lens, text, text_lengths)
        return loss_ctc, encoder_out_lens


def build_ctc_espnet() -> tuple[nn.Module, tuple]:
    torch.manual_seed(830)
    model = ESPnetCTCModel()
    g = seeded(831)
    speech_lengths = torch.tensor([40, 33, 37])
    speech = torch.randn(3, 40, 20, generator=g) * make_non_pad_mask(speech_lengths, maxlen=40)[..., None]
    text_lengths = torch.tensor([5, 3, 4])
    text = torch.randint(1, 10, (3, 5), generator=g) * make_non_pad_mask(text_lengths, maxlen=5)
    text = text.masked_fill(make_pad_mask(text_lengths, maxlen=5), -1)
    return model, (speech, speech_lengths, text, text_lengths)

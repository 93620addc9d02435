"""Programs that call ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` modules in the shapes real
repositories write them, for ``dynscope.fix``: Dynamo does not trace those modules (every call
breaks), and their recurrence written out with the module's own weights keeps outputs and
gradients. A tagger with a two-layer bidirectional LSTM encoder and a GRU decoder (both calls one
patch), an OCR encoder whose setting picks an LSTM or a GRU (mmocr's SAR does), a
trajectory decoder over an explicit state in a decoding loop, a training LSTM with dropout
between its layers; and one that must stay: a GRU over a packed sequence.

As in tests/corpus/fix_programs.py: each program is a (model, inputs) builder; each break
site carries ``# SITE: <rewrite>`` (the rewrite expected to remove it) or ``# SITE: none``
(no patch may be verified). Imports only torch and the standard library: ``fix`` imports
patched copies of it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class Seq2SeqTagger(nn.Module):
    """A bidirectional two-layer LSTM encoder and a GRU decoder over its outputs, batch first."""

    def __init__(self, dim: int = 6, hidden: int = 8, tags: int = 5) -> None:
        super().__init__()
        self.encoder = nn.LSTM(dim, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.decoder = nn.GRU(2 * hidden, hidden, batch_first=True)
        self.head = nn.Linear(hidden, tags)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        enc, (h, c) = self.encoder(x)  # SITE: recurrent module unrolled with its own weights
        dec, _ = self.decoder(enc)  # PyTorch logs one break for the frame: the decoder's call is never reached
        return self.head(dec), h.sum(0) + c.sum(0)


def seq2seq_tagger() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(960)
    return Seq2SeqTagger(), _x(3, 5, 6)


class HolisticEncoder(nn.Module):
    """An OCR encoder's holistic feature: its setting picks a GRU or an LSTM for one attribute."""

    def __init__(self, d_model: int = 8, gru: bool = False) -> None:
        super().__init__()
        kwargs = {"input_size": d_model, "hidden_size": d_model, "num_layers": 2, "batch_first": True}
        if gru:
            self.rnn_encoder = nn.GRU(**kwargs)
        else:
            self.rnn_encoder = nn.LSTM(**kwargs)  # type: ignore[assignment]
        self.linear = nn.Linear(d_model, d_model)

    def forward(self, feat: torch.Tensor) -> torch.Tensor:
        feat_v = feat.max(dim=2)[0].permute(0, 2, 1)  # [N, W, C]
        holistic_feat = self.rnn_encoder(feat_v)[0]  # SITE: recurrent module unrolled with its own weights
        return self.linear(holistic_feat[:, -1, :])


def holistic_encoder() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(961)
    return HolisticEncoder(), _x(2, 8, 3, 7)


class TrajectoryDecoder(nn.Module):
    """A step-by-step decoder over an explicit (h, c) state, its LSTM called once per step."""

    def __init__(self, hidden: int = 8, steps: int = 4) -> None:
        super().__init__()
        self.steps = steps
        self.embed = nn.Linear(2, hidden)
        self.lstm = nn.LSTM(hidden, hidden)
        self.to_pos = nn.Linear(hidden, 2)

    def forward(self, last_pos: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        preds = []
        x = self.embed(last_pos).unsqueeze(0)
        for _ in range(self.steps):
            out, state = self.lstm(x, state)  # SITE: recurrent module unrolled with its own weights
            rel = self.to_pos(out.squeeze(0))
            preds.append(rel)
            x = self.embed(rel).unsqueeze(0)
        return torch.stack(preds)


def trajectory_decoder() -> tuple[nn.Module, tuple[Any, ...]]:
    torch.manual_seed(962)
    return TrajectoryDecoder(), (_x(3, 2), (_x(1, 3, 8, seed=1), _x(1, 3, 8, seed=2)))


class DroppedLayers(nn.Module):
    """A training two-layer LSTM with dropout between its layers: on the CPU the fused kernel
    draws its mask with the same dropout over the same generator as the written-out recurrence,
    so the outputs are the same (cuDNN's mask is its own: on a GPU they would differ as two
    draws do)."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 6, num_layers=2, dropout=0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lstm(x)[0].sum(-1)  # SITE: recurrent module unrolled with its own weights


def dropped_layers() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(963)
    return DroppedLayers().train(), _x(5, 2, 4)


class PackedEncoder(nn.Module):
    """A GRU over a packed batch of padded sequences: a PackedSequence is no tensor, and no
    written-out recurrence takes it."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(4, 6)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)  # SITE: none
        _, h = self.gru(packed)  # SITE: none
        return h[-1]


def packed_encoder() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(964)
    return PackedEncoder(), (_x(5, 3, 4), torch.tensor([5, 2, 4]))



class QuestionEncoder(nn.Module):
    """A question embedding whose recurrent class a setting picks, its weights flattened for
    cuDNN before each call, its zero state made from a weight read off the module (Dynamo breaks
    there too, and no rewrite here takes it: that site stays, its own)."""

    def __init__(self, dim: int = 6, hidden: int = 8, rnn_type: str = "GRU") -> None:
        super().__init__()
        rnn_cls = nn.LSTM if rnn_type == "LSTM" else nn.GRU
        self.rnn = rnn_cls(dim, hidden, 1, batch_first=True)
        self.hidden = hidden

    def init_hidden(self, batch: int) -> torch.Tensor:
        weight = self.rnn.weight_hh_l0.data  # SITE: none
        return weight.new(1, batch, self.hidden).zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.init_hidden(x.size(0))
        self.rnn.flatten_parameters()  # SITE: recurrent module unrolled with its own weights
        output, hidden = self.rnn(x, hidden)
        return output[:, -1] + hidden[0]


def question_encoder() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(965)
    return QuestionEncoder(), _x(3, 4, 6)


class ScaledEncoder(nn.Module):
    """An encoder that scales its input by a number read back first, then runs its LSTM: the
    number's patch rewrites a line inside the lines the recurrence's patch spans (from __init__
    to forward), so the two cannot be written together; the recurrence's, which rewrites the
    number's line too, is the one written. Not among PROGRAMS: tests/capture/fix/test_fix_rnns.py
    asserts what fix says of it."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = float(x.std())
        out, _ = self.lstm(x / scale)
        return out.sum(0)


def scaled_encoder() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(967)
    return ScaledEncoder(), _x(5, 2, 4)

#: Every program of this corpus: name -> builder.
PROGRAMS = {
    "seq2seq_tagger": seq2seq_tagger,
    "holistic_encoder": holistic_encoder,
    "trajectory_decoder": trajectory_decoder,
    "dropped_layers": dropped_layers,
    "packed_encoder": packed_encoder,
    "question_encoder": question_encoder,
}

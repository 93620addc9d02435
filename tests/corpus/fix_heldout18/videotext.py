"""Contrastive video-text retrieval: ArrowLuo/CLIP4Clip.

``modules/module_clip.py``'s CLIP pieces (``LayerNorm`` in float32, ``QuickGELU``, ``ResidualAttentionBlock`` over
``(x, video_frame)`` tuples, the ``build_attention_mask`` causal text mask, ``encode_text`` taking the EOT token's
feature, a frame-wise visual encoder reduced to a patch projection and one block) and ``modules/modeling.py``'s
``CLIP4Clip`` with the ``seqLSTM`` similarity header (frames packed by their mask lengths through an ``nn.LSTM``,
unpacked, the untouched tail re-attached, the residual), ``_mean_pooling_for_similarity_visual`` and ``CrossEn`` in
both directions, under the loss half of one iteration of ``main_task_retrieval.py``'s ``train_epoch``
(``total_loss += float(loss)``).  Training is single-process here: ``allgather`` gathers nothing.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .helpers import seeded

# ------------------------------------------------------------------ modules/module_clip.py (reduced)


class LayerNorm(nn.LayerNorm):
    """Subclass torch's LayerNorm to handle fp16."""

    def forward(self, x: torch.Tensor):
        orig_type = x.dtype
        ret = super().forward(x.type(torch.float32))
        return ret.type(orig_type)


class QuickGELU(nn.Module):
    def forward(self, x: torch.Tensor):
        return x * torch.sigmoid(1.702 * x)


class ResidualAttentionBlock(nn.Module):
    def __init__(self, d_model: int, n_head: int, attn_mask=None):
        super().__init__()

        self.attn = nn.MultiheadAttention(d_model, n_head)
        self.ln_1 = LayerNorm(d_model)
        self.mlp = nn.Sequential(
            OrderedDict(
                [
                    ("c_fc", nn.Linear(d_model, d_model * 4)),
                    ("gelu", QuickGELU()),
                    ("c_proj", nn.Linear(d_model * 4, d_model)),
                ]
            )
        )
        self.ln_2 = LayerNorm(d_model)
        self.attn_mask = attn_mask

    def attention(self, x: torch.Tensor):
        attn_mask_ = self.attn_mask
        if self.attn_mask is not None and hasattr(self.attn_mask, "__call__"):  # noqa: B004
            attn_mask_ = self.attn_mask(x.size(0))  # LND

        attn_mask_ = attn_mask_.to(dtype=x.dtype, device=x.device) if attn_mask_ is not None else None
        return self.attn(x, x, x, need_weights=False, attn_mask=attn_mask_)[0]

    def forward(self, x_tuple: tuple):
        x, video_frame = x_tuple
        x = x + self.attention(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return (x, video_frame)


class Transformer(nn.Module):
    def __init__(self, width: int, layers: int, heads: int, attn_mask=None):
        super().__init__()
        self.width = width
        self.layers = layers
        self.resblocks = nn.Sequential(
            *[ResidualAttentionBlock(width, heads, attn_mask) for _ in range(layers)]
        )

    def forward(self, x: torch.Tensor, video_frame=-1):
        return self.resblocks((x, video_frame))[0]


class VisualTransformer(nn.Module):
    def __init__(
        self, input_resolution: int, patch_size: int, width: int, layers: int, heads: int, output_dim: int
    ):
        super().__init__()
        self.input_resolution = input_resolution
        self.output_dim = output_dim
        self.conv1 = nn.Conv2d(
            in_channels=3, out_channels=width, kernel_size=patch_size, stride=patch_size, bias=False
        )

        scale = width**-0.5
        self.class_embedding = nn.Parameter(scale * torch.randn(width))
        self.positional_embedding = nn.Parameter(
            scale * torch.randn((input_resolution // patch_size) ** 2 + 1, width)
        )
        self.ln_pre = LayerNorm(width)

        self.transformer = Transformer(width, layers, heads)

        self.ln_post = LayerNorm(width)
        self.proj = nn.Parameter(scale * torch.randn(width, output_dim))

    def forward(self, x: torch.Tensor, video_frame=-1):
        x = self.conv1(x)  # shape = [*, width, grid, grid]
        x = x.reshape(x.shape[0], x.shape[1], -1)  # shape = [*, width, grid ** 2]
        x = x.permute(0, 2, 1)  # shape = [*, grid ** 2, width]
        x = torch.cat(
            [
                self.class_embedding.to(x.dtype)
                + torch.zeros(x.shape[0], 1, x.shape[-1], dtype=x.dtype, device=x.device),
                x,
            ],
            dim=1,
        )  # shape = [*, grid ** 2 + 1, width]
        x = x + self.positional_embedding.to(x.dtype)
        x = self.ln_pre(x)

        x = x.permute(1, 0, 2)  # NLD -> LND
        x = self.transformer(x, video_frame=video_frame)
        x = x.permute(1, 0, 2)  # LND -> NLD

        # Move the three lines below to `encode_image` for entire hidden sequence
        # x = self.ln_post(x[:, 0, :])
        # if self.proj is not None:
        #     x = x @ self.proj

        return x


class CLIP(nn.Module):
    def __init__(
        self,
        embed_dim,
        image_resolution,
        vision_layers,
        vision_width,
        vision_patch_size,
        context_length,
        vocab_size,
        transformer_width,
        transformer_heads,
        transformer_layers,
    ):
        super().__init__()

        self.context_length = context_length

        vision_heads = vision_width // 16
        self.visual = VisualTransformer(
            input_resolution=image_resolution,
            patch_size=vision_patch_size,
            width=vision_width,
            layers=vision_layers,
            heads=vision_heads,
            output_dim=embed_dim,
        )

        self.transformer = Transformer(
            width=transformer_width,
            layers=transformer_layers,
            heads=transformer_heads,
            attn_mask=self.build_attention_mask,
        )

        self.vocab_size = vocab_size
        self.token_embedding = nn.Embedding(vocab_size, transformer_width)
        self.positional_embedding = nn.Parameter(torch.empty(self.context_length, transformer_width))
        self.ln_final = LayerNorm(transformer_width)

        self.text_projection = nn.Parameter(torch.empty(transformer_width, embed_dim))
        self.logit_scale = nn.Parameter(torch.ones([]))

        self.initialize_parameters()

    def initialize_parameters(self):
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        nn.init.normal_(self.positional_embedding, std=0.01)
        nn.init.normal_(self.text_projection, std=self.transformer.width**-0.5)

    def build_attention_mask(self, context_length):
        # lazily create causal attention mask, with full attention between the vision tokens
        # pytorch uses additive attention mask; fill with -inf
        mask = torch.zeros(context_length, context_length)
        mask.fill_(float("-inf"))
        mask.triu_(1)  # zero out the lower diagonal
        return mask

    @property
    def dtype(self):
        return self.visual.conv1.weight.dtype

    def encode_image(self, image, return_hidden=False, video_frame=-1):
        hidden = self.visual(image.type(self.dtype), video_frame=video_frame)
        hidden = self.visual.ln_post(hidden) @ self.visual.proj

        x = hidden[:, 0, :]

        if return_hidden:
            return x, hidden

        return x

    def encode_text(self, text, return_hidden=False):
        x = self.token_embedding(text).type(self.dtype)  # [batch_size, n_ctx, d_model]

        pos_emd = self.positional_embedding[: x.size(1), :].type(self.dtype)
        x = x + pos_emd
        x = x.permute(1, 0, 2)  # NLD -> LND
        x = self.transformer(x)
        x = x.permute(1, 0, 2)  # LND -> NLD

        hidden = self.ln_final(x).type(self.dtype) @ self.text_projection

        # x.shape = [batch_size, n_ctx, transformer.width]
        # take features from the eot embedding (eot_token is the highest number in each sequence)
        x = hidden[torch.arange(hidden.shape[0]), text.argmax(dim=-1)]

        if return_hidden:
            return x, hidden

        return x


# ------------------------------------------------------------------ modules/until_module.py, modules/modeling.py


def allgather(tensor, args):
    """``AllGather.apply`` across the workers; with a world size of one there is nothing to gather."""
    if args.world_size == 1:
        return tensor
    raise NotImplementedError("distributed training")


class CrossEn(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, sim_matrix):
        logpt = F.log_softmax(sim_matrix, dim=-1)
        logpt = torch.diag(logpt)
        nce_loss = -logpt
        sim_loss = nce_loss.mean()
        return sim_loss


class CLIP4Clip(nn.Module):
    def __init__(self, clip, task_config):
        super().__init__()
        self.task_config = task_config
        self.loose_type = task_config.loose_type
        self.sim_header = task_config.sim_header
        self.clip = clip
        embed_dim = clip.text_projection.shape[1]
        if self.sim_header == "seqLSTM":
            self.lstm_visual = nn.LSTM(
                input_size=embed_dim,
                hidden_size=embed_dim,
                batch_first=True,
                bidirectional=False,
                num_layers=1,
            )
        self.loss_fct = CrossEn()

    def forward(self, input_ids, token_type_ids, attention_mask, video, video_mask=None):
        input_ids = input_ids.view(-1, input_ids.shape[-1])
        token_type_ids = token_type_ids.view(-1, token_type_ids.shape[-1])
        attention_mask = attention_mask.view(-1, attention_mask.shape[-1])
        video_mask = video_mask.view(-1, video_mask.shape[-1])

        # T x 3 x H x W
        video = torch.as_tensor(video).float()
        b, pair, bs, ts, channel, h, w = video.shape
        video = video.view(b * pair * bs * ts, channel, h, w)
        video_frame = bs * ts

        sequence_output, visual_output = self.get_sequence_visual_output(
            input_ids, token_type_ids, attention_mask, video, video_mask, shaped=True, video_frame=video_frame
        )

        if self.training:
            loss = 0.0
            sim_matrix, *_tmp = self.get_similarity_logits(
                sequence_output,
                visual_output,
                attention_mask,
                video_mask,
                shaped=True,
                loose_type=self.loose_type,
            )
            sim_loss1 = self.loss_fct(sim_matrix)
            sim_loss2 = self.loss_fct(sim_matrix.T)
            sim_loss = (sim_loss1 + sim_loss2) / 2
            loss += sim_loss

            return loss
        else:
            return None

    def get_sequence_output(self, input_ids, token_type_ids, attention_mask, shaped=False):
        bs_pair = input_ids.size(0)
        sequence_hidden = self.clip.encode_text(input_ids).float()
        sequence_hidden = sequence_hidden.view(bs_pair, -1, sequence_hidden.size(-1))

        return sequence_hidden

    def get_visual_output(self, video, video_mask, shaped=False, video_frame=-1):
        bs_pair = video_mask.size(0)
        visual_hidden = self.clip.encode_image(video, video_frame=video_frame).float()
        visual_hidden = visual_hidden.view(bs_pair, -1, visual_hidden.size(-1))

        return visual_hidden

    def get_sequence_visual_output(
        self, input_ids, token_type_ids, attention_mask, video, video_mask, shaped=False, video_frame=-1
    ):
        sequence_output = self.get_sequence_output(input_ids, token_type_ids, attention_mask, shaped=True)
        visual_output = self.get_visual_output(video, video_mask, shaped=True, video_frame=video_frame)

        return sequence_output, visual_output

    def _mean_pooling_for_similarity_visual(self, visual_output, video_mask):
        video_mask_un = video_mask.to(dtype=torch.float).unsqueeze(-1)
        visual_output = visual_output * video_mask_un
        video_mask_un_sum = torch.sum(video_mask_un, dim=1, dtype=torch.float)
        video_mask_un_sum[video_mask_un_sum == 0.0] = 1.0
        video_out = torch.sum(visual_output, dim=1) / video_mask_un_sum
        return video_out

    def _loose_similarity(
        self, sequence_output, visual_output, attention_mask, video_mask, sim_header="meanP"
    ):
        sequence_output, visual_output = sequence_output.contiguous(), visual_output.contiguous()

        if sim_header == "meanP":
            # Default: Parameter-free type
            pass
        elif sim_header == "seqLSTM":
            # Sequential type: LSTM
            visual_output_original = visual_output
            visual_output = pack_padded_sequence(  # BREAK: unroll, mask by the lengths
                visual_output, torch.sum(video_mask, dim=-1).cpu(), batch_first=True, enforce_sorted=False
            )
            visual_output, _ = self.lstm_visual(visual_output)  # BREAK: unroll the LSTM
            if self.training:
                self.lstm_visual.flatten_parameters()
            visual_output, _ = pad_packed_sequence(visual_output, batch_first=True)
            visual_output = torch.cat(
                (visual_output, visual_output_original[:, visual_output.size(1) :, ...].contiguous()), dim=1
            )
            visual_output = visual_output + visual_output_original

        if self.training:
            visual_output = allgather(visual_output, self.task_config)
            video_mask = allgather(video_mask, self.task_config)
            sequence_output = allgather(sequence_output, self.task_config)

        visual_output = visual_output / visual_output.norm(dim=-1, keepdim=True)
        visual_output = self._mean_pooling_for_similarity_visual(visual_output, video_mask)
        visual_output = visual_output / visual_output.norm(dim=-1, keepdim=True)

        sequence_output = sequence_output.squeeze(1)
        sequence_output = sequence_output / sequence_output.norm(dim=-1, keepdim=True)

        logit_scale = self.clip.logit_scale.exp()
        retrieve_logits = logit_scale * torch.matmul(sequence_output, visual_output.t())
        return retrieve_logits

    def get_similarity_logits(
        self, sequence_output, visual_output, attention_mask, video_mask, shaped=False, loose_type=False
    ):
        contrastive_direction = ()
        assert self.sim_header in ["meanP", "seqLSTM", "seqTransf"]
        retrieve_logits = self._loose_similarity(
            sequence_output, visual_output, attention_mask, video_mask, sim_header=self.sim_header
        )

        return retrieve_logits, contrastive_direction


# ------------------------------------------------------------------ main_task_retrieval.py


class TrainStep(nn.Module):
    """The loss half of one ``for step, batch in enumerate(train_dataloader)`` iteration of ``train_epoch``."""

    def __init__(self, model, args):
        super().__init__()
        self.model = model
        self.args = args
        self.total_loss = 0

    def forward(self, batch):
        model, args = self.model, self.args
        model.train()
        input_ids, input_mask, segment_ids, video, video_mask = batch

        loss = model(input_ids, segment_ids, input_mask, video, video_mask)

        if args.gradient_accumulation_steps > 1:
            loss = loss / args.gradient_accumulation_steps

        self.total_loss += float(loss)  # BREAK: the running loss can stay a tensor
        return loss


def build_clip4clip_step():
    seeded(1821)

    class Args:
        loose_type = True
        sim_header = "seqLSTM"
        world_size = 1
        rank = 0
        gradient_accumulation_steps = 1

    clip = CLIP(
        embed_dim=16,
        image_resolution=16,
        vision_layers=1,
        vision_width=32,
        vision_patch_size=8,
        context_length=8,
        vocab_size=50,
        transformer_width=16,
        transformer_heads=2,
        transformer_layers=1,
    )
    model = CLIP4Clip(clip, Args)
    b, max_frames, words = 3, 4, 8
    input_ids = torch.randint(1, 40, (b, 1, words))
    input_ids[:, 0, 5] = 49  # the end-of-text token, the largest id
    input_ids[:, 0, 6:] = 0
    input_mask = (input_ids > 0).long()
    segment_ids = torch.zeros_like(input_ids)
    video = torch.randn(b, 1, max_frames, 1, 3, 16, 16)
    video_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 0]]).view(b, 1, max_frames)
    return TrainStep(model, Args), ((input_ids, input_mask, segment_ids, video, video_mask),)

"""Vision-language: salesforce/BLIP's ``BLIP_Retrieval.forward`` (image-text contrastive learning against momentum
encoders and feature queues with the image ids as soft targets, ``_momentum_update`` through ``.data``,
``_dequeue_and_enqueue`` at the pointer read with ``int(self.ptr_queue)``, and image-text matching on hard negatives
drawn per row with ``torch.multinomial(...).item()``), with a small ViT and a BERT-style text encoder whose layers
cross-attend to the image in the matching passes."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded


class Block(nn.Module):
    """A pre-norm transformer block; with ``cross`` it also attends to ``encoder_hidden_states`` (BERT's crossattention)."""

    def __init__(self, dim=16, heads=2, cross=False):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.cross = cross
        if cross:
            self.norm_c = nn.LayerNorm(dim)
            self.crossattention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x, key_padding_mask=None, encoder_hidden_states=None, encoder_key_padding_mask=None):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, key_padding_mask=key_padding_mask, need_weights=False)[0]
        if self.cross and encoder_hidden_states is not None:
            h = self.norm_c(x)
            x = x + self.crossattention(h, encoder_hidden_states, encoder_hidden_states,
                                        key_padding_mask=encoder_key_padding_mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, img_size=16, patch_size=8, embed_dim=16, depth=1):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, embed_dim, patch_size, patch_size)
        num_patches = (img_size // patch_size) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, embed_dim) * 0.02)
        self.blocks = nn.ModuleList([Block(embed_dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim)

    def forward(self, x):
        B = x.shape[0]
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls_tokens = self.cls_token.expand(B, -1, -1)
        x = torch.cat((cls_tokens, x), dim=1)
        x = x + self.pos_embed[:, : x.size(1), :]
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)


class BertModel(nn.Module):
    """The text encoder: ``mode='text'`` runs self-attention only, the multimodal passes cross-attend to the image."""

    def __init__(self, vocab_size=30, hidden_size=16, max_len=8, depth=1):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size)
        self.position_embeddings = nn.Embedding(max_len, hidden_size)
        self.layer = nn.ModuleList([Block(hidden_size, cross=True) for _ in range(depth)])
        self.hidden_size = hidden_size

    def forward(self, input_ids, attention_mask, encoder_hidden_states=None, encoder_attention_mask=None, mode="multimodal"):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)[None]
        key_padding_mask = attention_mask == 0
        enc_mask = None if encoder_attention_mask is None else encoder_attention_mask == 0
        for layer in self.layer:
            if mode == "text":
                x = layer(x, key_padding_mask=key_padding_mask)
            else:
                x = layer(x, key_padding_mask=key_padding_mask, encoder_hidden_states=encoder_hidden_states,
                          encoder_key_padding_mask=enc_mask)
        return x


@torch.no_grad()
def concat_all_gather(tensor):
    """Performs all_gather operation on the provided tensors (one process here: the tensor itself)."""
    if not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return tensor
    tensors_gather = [torch.ones_like(tensor) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(tensors_gather, tensor, async_op=False)
    output = torch.cat(tensors_gather, dim=0)
    return output


class BLIP_Retrieval(nn.Module):
    def __init__(self, embed_dim=8, queue_size=12, momentum=0.995, negative_all_rank=False, enc_token_id=2):
        super().__init__()
        self.visual_encoder = VisionTransformer()
        vision_width = 16
        self.text_encoder = BertModel()
        text_width = self.text_encoder.hidden_size
        self.enc_token_id = enc_token_id

        self.vision_proj = nn.Linear(vision_width, embed_dim)
        self.text_proj = nn.Linear(text_width, embed_dim)

        self.itm_head = nn.Linear(text_width, 2)

        # create momentum encoders
        self.visual_encoder_m = VisionTransformer()
        self.vision_proj_m = nn.Linear(vision_width, embed_dim)
        self.text_encoder_m = BertModel()
        self.text_proj_m = nn.Linear(text_width, embed_dim)

        self.model_pairs = [
            [self.visual_encoder, self.visual_encoder_m],
            [self.vision_proj, self.vision_proj_m],
            [self.text_encoder, self.text_encoder_m],
            [self.text_proj, self.text_proj_m],
        ]
        self.copy_params()

        # create the queue
        self.register_buffer("image_queue", torch.randn(embed_dim, queue_size))
        self.register_buffer("text_queue", torch.randn(embed_dim, queue_size))
        self.register_buffer("idx_queue", torch.full((1, queue_size), -100))
        self.register_buffer("ptr_queue", torch.zeros(1, dtype=torch.long))

        self.image_queue = nn.functional.normalize(self.image_queue, dim=0)
        self.text_queue = nn.functional.normalize(self.text_queue, dim=0)

        self.queue_size = queue_size
        self.momentum = momentum
        self.temp = nn.Parameter(0.07 * torch.ones([]))

        self.negative_all_rank = negative_all_rank

    def forward(self, image, input_ids, attention_mask, alpha, idx):
        with torch.no_grad():
            self.temp.clamp_(0.001, 0.5)

        image_embeds = self.visual_encoder(image)
        image_atts = torch.ones(image_embeds.size()[:-1], dtype=torch.long).to(image.device)
        image_feat = F.normalize(self.vision_proj(image_embeds[:, 0, :]), dim=-1)

        text_output = self.text_encoder(input_ids, attention_mask=attention_mask, mode="text")
        text_feat = F.normalize(self.text_proj(text_output[:, 0, :]), dim=-1)

        ###============== Image-text Contrastive Learning ===================###
        idx = idx.view(-1, 1)
        idx_all = torch.cat([idx.t(), self.idx_queue.clone().detach()], dim=1)
        pos_idx = torch.eq(idx, idx_all).float()
        sim_targets = pos_idx / pos_idx.sum(1, keepdim=True)

        # get momentum features
        with torch.no_grad():
            self._momentum_update()
            image_embeds_m = self.visual_encoder_m(image)
            image_feat_m = F.normalize(self.vision_proj_m(image_embeds_m[:, 0, :]), dim=-1)
            image_feat_m_all = torch.cat([image_feat_m.t(), self.image_queue.clone().detach()], dim=1)

            text_output_m = self.text_encoder_m(input_ids, attention_mask=attention_mask, mode="text")
            text_feat_m = F.normalize(self.text_proj_m(text_output_m[:, 0, :]), dim=-1)
            text_feat_m_all = torch.cat([text_feat_m.t(), self.text_queue.clone().detach()], dim=1)

            sim_i2t_m = image_feat_m @ text_feat_m_all / self.temp
            sim_t2i_m = text_feat_m @ image_feat_m_all / self.temp

            sim_i2t_targets = alpha * F.softmax(sim_i2t_m, dim=1) + (1 - alpha) * sim_targets
            sim_t2i_targets = alpha * F.softmax(sim_t2i_m, dim=1) + (1 - alpha) * sim_targets

        sim_i2t = image_feat @ text_feat_m_all / self.temp
        sim_t2i = text_feat @ image_feat_m_all / self.temp

        loss_i2t = -torch.sum(F.log_softmax(sim_i2t, dim=1) * sim_i2t_targets, dim=1).mean()
        loss_t2i = -torch.sum(F.log_softmax(sim_t2i, dim=1) * sim_t2i_targets, dim=1).mean()

        loss_ita = (loss_i2t + loss_t2i) / 2

        idxs = concat_all_gather(idx)
        self._dequeue_and_enqueue(image_feat_m, text_feat_m, idxs)

        ###============== Image-text Matching ===================###
        encoder_input_ids = input_ids.clone()
        encoder_input_ids[:, 0] = self.enc_token_id

        # forward the positve image-text pair
        bs = image.size(0)
        output_pos = self.text_encoder(encoder_input_ids, attention_mask=attention_mask,
                                       encoder_hidden_states=image_embeds, encoder_attention_mask=image_atts)

        with torch.no_grad():
            mask = torch.eq(idx, idx.t())

            sim_i2t = image_feat @ text_feat.t() / self.temp
            sim_t2i = text_feat @ image_feat.t() / self.temp

            weights_i2t = F.softmax(sim_i2t, dim=1)
            weights_i2t.masked_fill_(mask, 0)

            weights_t2i = F.softmax(sim_t2i, dim=1)
            weights_t2i.masked_fill_(mask, 0)

        # select a negative image (from same rank) for each text
        image_embeds_neg = []
        for b in range(bs):
            neg_idx = torch.multinomial(weights_t2i[b], 1).item()  # BREAK: keep the drawn index a 1-element tensor and take the row with index_select: the same multinomial draws, in the same order
            image_embeds_neg.append(image_embeds[neg_idx])
        image_embeds_neg = torch.stack(image_embeds_neg, dim=0)

        # select a negative text (from same rank) for each image
        text_ids_neg = []
        text_atts_neg = []
        for b in range(bs):
            neg_idx = torch.multinomial(weights_i2t[b], 1).item()
            text_ids_neg.append(encoder_input_ids[neg_idx])
            text_atts_neg.append(attention_mask[neg_idx])

        text_ids_neg = torch.stack(text_ids_neg, dim=0)
        text_atts_neg = torch.stack(text_atts_neg, dim=0)

        text_ids_all = torch.cat([encoder_input_ids, text_ids_neg], dim=0)
        text_atts_all = torch.cat([attention_mask, text_atts_neg], dim=0)

        image_embeds_all = torch.cat([image_embeds_neg, image_embeds], dim=0)
        image_atts_all = torch.cat([image_atts, image_atts], dim=0)

        output_neg = self.text_encoder(text_ids_all, attention_mask=text_atts_all,
                                       encoder_hidden_states=image_embeds_all, encoder_attention_mask=image_atts_all)

        vl_embeddings = torch.cat([output_pos[:, 0, :], output_neg[:, 0, :]], dim=0)
        vl_output = self.itm_head(vl_embeddings)

        itm_labels = torch.cat([torch.ones(bs, dtype=torch.long), torch.zeros(2 * bs, dtype=torch.long)], dim=0).to(image.device)
        loss_itm = F.cross_entropy(vl_output, itm_labels)

        return loss_ita, loss_itm

    @torch.no_grad()
    def copy_params(self):
        for model_pair in self.model_pairs:
            for param, param_m in zip(model_pair[0].parameters(), model_pair[1].parameters(), strict=True):
                param_m.data.copy_(param.data)  # initialize
                param_m.requires_grad = False  # not update by gradient

    @torch.no_grad()
    def _momentum_update(self):
        for model_pair in self.model_pairs:
            for param, param_m in zip(model_pair[0].parameters(), model_pair[1].parameters(), strict=True):
                param_m.data = param_m.data * self.momentum + param.data * (1.0 - self.momentum)

    @torch.no_grad()
    def _dequeue_and_enqueue(self, image_feat, text_feat, idxs):
        # gather keys before updating queue
        image_feats = concat_all_gather(image_feat)
        text_feats = concat_all_gather(text_feat)

        batch_size = image_feats.shape[0]

        ptr = int(self.ptr_queue)  # BREAK: keep the pointer a tensor and write the columns ptr + arange(batch_size) by index (the queue size is a multiple of the batch: no wrap)
        assert self.queue_size % batch_size == 0  # for simplicity

        # replace the keys at ptr (dequeue and enqueue)
        self.image_queue[:, ptr : ptr + batch_size] = image_feats.T
        self.text_queue[:, ptr : ptr + batch_size] = text_feats.T
        self.idx_queue[:, ptr : ptr + batch_size] = idxs.T
        ptr = (ptr + batch_size) % self.queue_size  # move pointer

        self.ptr_queue[0] = ptr


class RetrievalStep(nn.Module):
    """``train_retrieval.train``'s step: the two losses and the queues they leave behind."""

    def __init__(self):
        super().__init__()
        self.model = BLIP_Retrieval()

    def forward(self, image, input_ids, attention_mask, idx, alpha=0.4):
        loss_ita, loss_itm = self.model(image, input_ids, attention_mask, alpha=alpha, idx=idx)
        loss = loss_ita + loss_itm
        return loss, loss_ita, loss_itm, self.model.idx_queue.clone(), self.model.text_queue.clone()


def build_blip_itm_retrieval():
    seeded(1510)
    input_ids = torch.randint(3, 30, (4, 8))
    input_ids[:, 0] = 1
    attention_mask = torch.ones(4, 8, dtype=torch.long)
    attention_mask[1, 6:] = 0
    attention_mask[3, 5:] = 0
    idx = torch.tensor([101, 102, 101, 103])  # two captions of image 101
    step = RetrievalStep().train()
    step.model.ptr_queue[0] = 4  # the queue part-filled by an earlier step
    return step, (torch.randn(4, 3, 16, 16), input_ids, attention_mask, idx)

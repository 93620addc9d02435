"""Image captioning: sgrvinod/a-PyTorch-Tutorial-to-Image-Captioning (Show, Attend and Tell).

``models.py``'s ``Encoder`` (a small conv trunk standing in for the ResNet-101, the adaptive pool to the encoded
size), ``Attention`` and ``DecoderWithAttention.forward`` (captions sorted by length, ``decode_lengths`` from
``tolist()``, the shrinking ``batch_size_t`` per time step, the gated attention-weighted encoding);
``train.py``'s ``validate`` iteration (the scores and targets packed by ``pack_padded_sequence``, the doubly
stochastic attention regularisation, the top-5 accuracy meter), and ``caption.py``'s
``caption_image_beam_search`` (the beam shrinking as sequences reach ``<end>``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from .helpers import AverageMeter, accuracy, seeded

device = torch.device("cpu")

# the word map of the preprocessed COCO captions, cut down
WORD_MAP = {"<pad>": 0, "<start>": 1, "<end>": 2, "<unk>": 3}
WORD_MAP.update({f"w{i}": i for i in range(4, 40)})

# Model parameters
emb_dim = 16  # dimension of word embeddings
attention_dim = 16  # dimension of attention linear layers
decoder_dim = 24  # dimension of decoder RNN
dropout = 0.5
alpha_c = 1.0  # regularization parameter for 'doubly stochastic attention', as in the paper


class Encoder(nn.Module):
    """Encoder."""

    def __init__(self, encoded_image_size=4, encoder_dim=32):
        super().__init__()
        self.enc_image_size = encoded_image_size

        # the pretrained ImageNet ResNet-101 in the tutorial; linear and pool layers removed
        modules = [
            nn.Conv2d(3, 16, 3, stride=2, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(inplace=True),
            nn.Conv2d(16, encoder_dim, 3, stride=2, padding=1),
            nn.BatchNorm2d(encoder_dim),
            nn.ReLU(inplace=True),
        ]
        self.resnet = nn.Sequential(*modules)

        # Resize image to fixed size to allow input images of variable size
        self.adaptive_pool = nn.AdaptiveAvgPool2d((encoded_image_size, encoded_image_size))

        self.fine_tune()

    def forward(self, images):
        out = self.resnet(images)  # (batch_size, 2048, image_size/32, image_size/32)
        out = self.adaptive_pool(out)  # (batch_size, 2048, encoded_image_size, encoded_image_size)
        out = out.permute(0, 2, 3, 1)  # (batch_size, encoded_image_size, encoded_image_size, 2048)
        return out

    def fine_tune(self, fine_tune=True):
        for p in self.resnet.parameters():
            p.requires_grad = False
        # If fine-tuning, only fine-tune convolutional blocks 2 through 4
        for c in list(self.resnet.children())[3:]:
            for p in c.parameters():
                p.requires_grad = fine_tune


class Attention(nn.Module):
    """Attention Network."""

    def __init__(self, encoder_dim, decoder_dim, attention_dim):
        super().__init__()
        self.encoder_att = nn.Linear(encoder_dim, attention_dim)  # linear layer to transform encoded image
        self.decoder_att = nn.Linear(decoder_dim, attention_dim)  # linear layer to transform decoder's output
        self.full_att = nn.Linear(attention_dim, 1)  # linear layer to calculate values to be softmax-ed
        self.relu = nn.ReLU()
        self.softmax = nn.Softmax(dim=1)  # softmax layer to calculate weights

    def forward(self, encoder_out, decoder_hidden):
        att1 = self.encoder_att(encoder_out)  # (batch_size, num_pixels, attention_dim)
        att2 = self.decoder_att(decoder_hidden)  # (batch_size, attention_dim)
        att = self.full_att(self.relu(att1 + att2.unsqueeze(1))).squeeze(2)  # (batch_size, num_pixels)
        alpha = self.softmax(att)  # (batch_size, num_pixels)
        attention_weighted_encoding = (encoder_out * alpha.unsqueeze(2)).sum(
            dim=1
        )  # (batch_size, encoder_dim)
        return attention_weighted_encoding, alpha


class DecoderWithAttention(nn.Module):
    """Decoder."""

    def __init__(self, attention_dim, embed_dim, decoder_dim, vocab_size, encoder_dim=32, dropout=0.5):
        super().__init__()
        self.encoder_dim = encoder_dim
        self.attention_dim = attention_dim
        self.embed_dim = embed_dim
        self.decoder_dim = decoder_dim
        self.vocab_size = vocab_size
        self.dropout = dropout

        self.attention = Attention(encoder_dim, decoder_dim, attention_dim)  # attention network

        self.embedding = nn.Embedding(vocab_size, embed_dim)  # embedding layer
        self.dropout = nn.Dropout(p=self.dropout)
        self.decode_step = nn.LSTMCell(embed_dim + encoder_dim, decoder_dim, bias=True)  # decoding LSTMCell
        self.init_h = nn.Linear(
            encoder_dim, decoder_dim
        )  # linear layer to find initial hidden state of LSTMCell
        self.init_c = nn.Linear(
            encoder_dim, decoder_dim
        )  # linear layer to find initial cell state of LSTMCell
        self.f_beta = nn.Linear(decoder_dim, encoder_dim)  # linear layer to create a sigmoid-activated gate
        self.sigmoid = nn.Sigmoid()
        self.fc = nn.Linear(decoder_dim, vocab_size)  # linear layer to find scores over vocabulary
        self.init_weights()  # initialize some layers with the uniform distribution

    def init_weights(self):
        self.embedding.weight.data.uniform_(-0.1, 0.1)
        self.fc.bias.data.fill_(0)
        self.fc.weight.data.uniform_(-0.1, 0.1)

    def init_hidden_state(self, encoder_out):
        mean_encoder_out = encoder_out.mean(dim=1)
        h = self.init_h(mean_encoder_out)  # (batch_size, decoder_dim)
        c = self.init_c(mean_encoder_out)
        return h, c

    def forward(self, encoder_out, encoded_captions, caption_lengths):
        batch_size = encoder_out.size(0)
        encoder_dim = encoder_out.size(-1)
        vocab_size = self.vocab_size

        # Flatten image
        encoder_out = encoder_out.view(batch_size, -1, encoder_dim)  # (batch_size, num_pixels, encoder_dim)
        num_pixels = encoder_out.size(1)

        # Sort input data by decreasing lengths; why? apparent below
        caption_lengths, sort_ind = caption_lengths.squeeze(1).sort(dim=0, descending=True)
        encoder_out = encoder_out[sort_ind]
        encoded_captions = encoded_captions[sort_ind]

        # Embedding
        embeddings = self.embedding(encoded_captions)  # (batch_size, max_caption_length, embed_dim)

        # Initialize LSTM state
        h, c = self.init_hidden_state(encoder_out)  # (batch_size, decoder_dim)

        # We won't decode at the <end> position, since we've finished generating as soon as we generate <end>
        # So, decoding lengths are actual lengths - 1
        decode_lengths = (caption_lengths - 1).tolist()  # BREAK: decode the padded length with row masks

        # Create tensors to hold word predicion scores and alphas
        predictions = torch.zeros(batch_size, max(decode_lengths), vocab_size).to(device)
        alphas = torch.zeros(batch_size, max(decode_lengths), num_pixels).to(device)

        # At each time-step, decode by
        # attention-weighing the encoder's output based on the decoder's previous hidden state output
        # then generate a new word in the decoder with the previous word and the attention weighted encoding
        for t in range(max(decode_lengths)):
            batch_size_t = sum([length > t for length in decode_lengths])
            attention_weighted_encoding, alpha = self.attention(encoder_out[:batch_size_t], h[:batch_size_t])
            gate = self.sigmoid(self.f_beta(h[:batch_size_t]))  # gating scalar, (batch_size_t, encoder_dim)
            attention_weighted_encoding = gate * attention_weighted_encoding
            h, c = self.decode_step(
                torch.cat([embeddings[:batch_size_t, t, :], attention_weighted_encoding], dim=1),
                (h[:batch_size_t], c[:batch_size_t]),
            )  # (batch_size_t, decoder_dim)
            preds = self.fc(self.dropout(h))  # (batch_size_t, vocab_size)
            predictions[:batch_size_t, t, :] = preds
            alphas[:batch_size_t, t, :] = alpha

        return predictions, encoded_captions, decode_lengths, alphas, sort_ind


class Validator(nn.Module):
    """``train.py``'s ``validate`` for one batch of the validation loader."""

    def __init__(self, vocab_size):
        super().__init__()
        self.encoder = Encoder()
        self.decoder = DecoderWithAttention(
            attention_dim=attention_dim,
            embed_dim=emb_dim,
            decoder_dim=decoder_dim,
            vocab_size=vocab_size,
            dropout=dropout,
        )
        self.criterion = nn.CrossEntropyLoss().to(device)
        self.top5accs = AverageMeter()

    def forward(self, imgs, caps, caplens):
        self.decoder.eval()  # eval mode (no dropout or batchnorm)
        if self.encoder is not None:
            self.encoder.eval()

        with torch.no_grad():
            # Forward prop.
            if self.encoder is not None:
                imgs = self.encoder(imgs)
            scores, caps_sorted, decode_lengths, alphas, sort_ind = self.decoder(imgs, caps, caplens)

            # Since we decoded starting with <start>, the targets are all words after <start>, up to <end>
            targets = caps_sorted[:, 1:]

            # Remove timesteps that we didn't decode at, or are pads
            # pack_padded_sequence is an easy trick to do this
            scores = pack_padded_sequence(scores, decode_lengths, batch_first=True).data  # BREAK: a mask
            targets = pack_padded_sequence(targets, decode_lengths, batch_first=True).data  # BREAK: a mask

            # Calculate loss
            loss = self.criterion(scores, targets)

            # Add doubly stochastic attention regularization
            loss += alpha_c * ((1.0 - alphas.sum(dim=1)) ** 2).mean()

            # Keep track of metrics
            top5 = accuracy(scores, targets, 5)
            self.top5accs.update(top5, sum(decode_lengths))

        return loss, sort_ind


def build_sat_validate():
    seeded(1701)
    v = Validator(len(WORD_MAP))
    imgs = torch.randn(4, 3, 16, 16)
    caplens = torch.tensor([[7], [5], [9], [4]])
    caps = torch.zeros(4, 10, dtype=torch.long)
    for i, n in enumerate(caplens.view(-1).tolist()):
        caps[i, 0] = WORD_MAP["<start>"]
        caps[i, 1 : n - 1] = torch.randint(4, len(WORD_MAP), (n - 2,))
        caps[i, n - 1] = WORD_MAP["<end>"]
    return v, (imgs, caps, caplens)


# ------------------------------------------------------------------ caption.py


def caption_image_beam_search(encoder, decoder, image, word_map, beam_size=3):
    """Reads an image and captions it with beam search."""
    k = beam_size
    vocab_size = len(word_map)

    # Encode
    image = image.unsqueeze(0)  # (1, 3, 256, 256)
    encoder_out = encoder(image)  # (1, enc_image_size, enc_image_size, encoder_dim)
    enc_image_size = encoder_out.size(1)
    encoder_dim = encoder_out.size(3)

    # Flatten encoding
    encoder_out = encoder_out.view(1, -1, encoder_dim)  # (1, num_pixels, encoder_dim)
    num_pixels = encoder_out.size(1)

    # We'll treat the problem as having a batch size of k
    encoder_out = encoder_out.expand(k, num_pixels, encoder_dim)  # (k, num_pixels, encoder_dim)

    # Tensor to store top k previous words at each step; now they're just <start>
    k_prev_words = torch.LongTensor([[word_map["<start>"]]] * k).to(device)  # (k, 1)

    # Tensor to store top k sequences; now they're just <start>
    seqs = k_prev_words  # (k, 1)

    # Tensor to store top k sequences' scores; now they're just 0
    top_k_scores = torch.zeros(k, 1).to(device)  # (k, 1)

    # Tensor to store top k sequences' alphas; now they're just 1s
    seqs_alpha = torch.ones(k, 1, enc_image_size, enc_image_size).to(
        device
    )  # (k, 1, enc_image_size, enc_image_size)

    # Lists to store completed sequences, their alphas and scores
    complete_seqs = list()
    complete_seqs_alpha = list()
    complete_seqs_scores = list()

    # Start decoding
    step = 1
    h, c = decoder.init_hidden_state(encoder_out)

    # s is a number less than or equal to k, because sequences are removed from this process once they hit <end>
    while True:
        embeddings = decoder.embedding(k_prev_words).squeeze(1)  # (s, embed_dim)

        awe, alpha = decoder.attention(encoder_out, h)  # (s, encoder_dim), (s, num_pixels)

        alpha = alpha.view(-1, enc_image_size, enc_image_size)  # (s, enc_image_size, enc_image_size)

        gate = decoder.sigmoid(decoder.f_beta(h))  # gating scalar, (s, encoder_dim)
        awe = gate * awe

        h, c = decoder.decode_step(torch.cat([embeddings, awe], dim=1), (h, c))  # (s, decoder_dim)

        scores = decoder.fc(h)  # (s, vocab_size)
        scores = F.log_softmax(scores, dim=1)

        # Add
        scores = top_k_scores.expand_as(scores) + scores  # (s, vocab_size)

        # For the first step, all k points will have the same scores (since same k previous words, h, c)
        if step == 1:
            top_k_scores, top_k_words = scores[0].topk(k, 0, True, True)  # (s)
        else:
            # Unroll and find top scores, and their unrolled indices
            top_k_scores, top_k_words = scores.view(-1).topk(k, 0, True, True)  # (s)

        # Convert unrolled indices to actual indices of scores
        prev_word_inds = top_k_words // vocab_size  # (s)
        next_word_inds = top_k_words % vocab_size  # (s)

        # Add new words to sequences, alphas
        seqs = torch.cat([seqs[prev_word_inds], next_word_inds.unsqueeze(1)], dim=1)  # (s, step+1)
        seqs_alpha = torch.cat(
            [seqs_alpha[prev_word_inds], alpha[prev_word_inds].unsqueeze(1)], dim=1
        )  # (s, step+1, enc_image_size, enc_image_size)

        # Which sequences are incomplete (didn't reach <end>)?
        end = word_map["<end>"]
        incomplete_inds = [ind for ind, w in enumerate(next_word_inds) if w != end]  # BREAK must-not: beam
        complete_inds = list(set(range(len(next_word_inds))) - set(incomplete_inds))

        # Set aside complete sequences
        if len(complete_inds) > 0:
            complete_seqs.extend(seqs[complete_inds].tolist())
            complete_seqs_alpha.extend(seqs_alpha[complete_inds].tolist())
            complete_seqs_scores.extend(top_k_scores[complete_inds])
        k -= len(complete_inds)  # reduce beam length accordingly

        # Proceed with incomplete sequences
        if k == 0:
            break
        seqs = seqs[incomplete_inds]
        seqs_alpha = seqs_alpha[incomplete_inds]
        h = h[prev_word_inds[incomplete_inds]]
        c = c[prev_word_inds[incomplete_inds]]
        encoder_out = encoder_out[prev_word_inds[incomplete_inds]]
        top_k_scores = top_k_scores[incomplete_inds].unsqueeze(1)
        k_prev_words = next_word_inds[incomplete_inds].unsqueeze(1)

        # Break if things have been going on too long
        if step > 12:
            break
        step += 1

    if not complete_seqs_scores:  # nothing reached <end> within the step limit: take the live beams
        complete_seqs.extend(seqs.tolist())
        complete_seqs_alpha.extend(seqs_alpha.tolist())
        complete_seqs_scores.extend(top_k_scores.view(-1))
    i = complete_seqs_scores.index(max(complete_seqs_scores))
    seq = complete_seqs[i]
    alphas = complete_seqs_alpha[i]

    return seq, alphas


class Captioner(nn.Module):
    """``caption.py``'s ``__main__``: the checkpoint's encoder and decoder in eval mode, one image captioned."""

    def __init__(self, word_map, beam_size=3):
        super().__init__()
        self.encoder = Encoder()
        self.decoder = DecoderWithAttention(
            attention_dim, emb_dim, decoder_dim, len(word_map), dropout=dropout
        )
        self.word_map = word_map
        self.rev_word_map = {v: k for k, v in word_map.items()}  # ix2word
        self.beam_size = beam_size

    def forward(self, img):
        self.encoder.eval()
        self.decoder.eval()
        with torch.no_grad():
            seq, alphas = caption_image_beam_search(
                self.encoder, self.decoder, img, self.word_map, self.beam_size
            )
        words = [self.rev_word_map[ind] for ind in seq]
        return seq, torch.FloatTensor(alphas), words


def build_sat_beam_search():
    seeded(1702)
    m = Captioner(WORD_MAP, beam_size=3)
    with torch.no_grad():
        m.decoder.fc.bias[WORD_MAP["<end>"]] = 2.5  # a trained decoder ends its captions
    return m, (torch.randn(3, 16, 16),)

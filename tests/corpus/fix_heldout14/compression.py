"""Model compression: hustzxd/LSQuantization's learned step size quantisation (``Conv2dLSQ``, ``LinearLSQ`` and
``ActLSQ`` initialising their step size from the first training batch when the ``init_state`` buffer is still 0,
``grad_scale`` and ``round_pass`` straight-through estimators) on a w4a4 ConvNet, and huggingface/transformers'
movement-pruning research project (emmental's ``MaskedLinear`` with the ``ThresholdBinarizer`` keeping at least
0.5% of the weights, ``masked_run_glue.py``'s cubic ``schedule_threshold``, the global top-k threshold read back with
``.item()``, the l1 ``regularization`` of the mask scores)."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import autograd, nn

from .helpers import seeded

# ------------------------------------------------------------------ LSQuantization models/_modules/lsq.py


def grad_scale(x, scale):
    y = x
    y_grad = x * scale
    return y.detach() - y_grad.detach() + y_grad


def round_pass(x):
    y = x.round()
    y_grad = x
    return y.detach() - y_grad.detach() + y_grad


class Conv2dLSQ(nn.Conv2d):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True, nbits=4):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=bias)
        self.nbits = nbits
        self.alpha = nn.Parameter(torch.Tensor(1))
        self.register_buffer("init_state", torch.zeros(1))

    def forward(self, x):
        if self.alpha is None:
            return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
        Qn = -(2 ** (self.nbits - 1))
        Qp = 2 ** (self.nbits - 1) - 1
        if self.training and self.init_state == 0:  # BREAK: initialise unconditionally in training: alpha.data.copy_(torch.where(init_state == 0, 2 * |w|.mean() / sqrt(Qp), alpha)), then init_state.fill_(1)
            self.alpha.data.copy_(2 * self.weight.abs().mean() / math.sqrt(Qp))
            self.init_state.fill_(1)
        g = 1.0 / math.sqrt(self.weight.numel() * Qp)
        alpha = grad_scale(self.alpha, g)
        w_q = round_pass((self.weight / alpha).clamp(Qn, Qp)) * alpha
        return F.conv2d(x, w_q, self.bias, self.stride, self.padding, self.dilation, self.groups)


class LinearLSQ(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, nbits=4):
        super().__init__(in_features, out_features, bias=bias)
        self.nbits = nbits
        self.alpha = nn.Parameter(torch.Tensor(1))
        self.register_buffer("init_state", torch.zeros(1))

    def forward(self, x):
        if self.alpha is None:
            return F.linear(x, self.weight, self.bias)
        Qn = -(2 ** (self.nbits - 1))
        Qp = 2 ** (self.nbits - 1) - 1
        if self.training and self.init_state == 0:  # BREAK: the same torch.where initialisation of alpha from the weights
            self.alpha.data.copy_(2 * self.weight.abs().mean() / math.sqrt(Qp))
            self.init_state.fill_(1)
        g = 1.0 / math.sqrt(self.weight.numel() * Qp)
        alpha = grad_scale(self.alpha, g)
        w_q = round_pass((self.weight / alpha).clamp(Qn, Qp)) * alpha
        return F.linear(x, w_q, self.bias)


class ActLSQ(nn.Module):
    def __init__(self, nbits=4, signed=False):
        super().__init__()
        self.nbits = nbits
        self.signed = signed
        self.alpha = nn.Parameter(torch.Tensor(1))
        self.register_buffer("init_state", torch.zeros(1))

    def forward(self, x):
        if self.alpha is None:
            return x
        if self.signed:
            Qn = -(2 ** (self.nbits - 1))
            Qp = 2 ** (self.nbits - 1) - 1
        else:
            Qn = 0
            Qp = 2**self.nbits - 1
        if self.training and self.init_state == 0:  # BREAK: the same torch.where initialisation of alpha, from this batch's activations
            self.alpha.data.copy_(2 * x.abs().mean() / math.sqrt(Qp))
            self.init_state.fill_(1)
        g = 1.0 / math.sqrt(x.numel() * Qp)
        alpha = grad_scale(self.alpha, g)
        x = round_pass((x / alpha).clamp(Qn, Qp)) * alpha
        return x


class LSQNet(nn.Module):
    """w4a4: the first conv full precision, then quantised activations feeding quantised weights."""

    def __init__(self, num_classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.act2 = ActLSQ(nbits=4)
        self.conv2 = Conv2dLSQ(8, 16, 3, stride=2, padding=1, bias=False, nbits=4)
        self.bn2 = nn.BatchNorm2d(16)
        self.act3 = ActLSQ(nbits=4)
        self.fc = LinearLSQ(16, num_classes, nbits=4)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(self.act2(x))))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(self.act3(x))


class LSQTrainStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = LSQNet()
        self.criterion = nn.CrossEntropyLoss()

    def forward(self, images, target):
        output = self.model(images)
        loss = self.criterion(output, target)
        return loss, output


def build_lsq_qat():
    seeded(1418)
    return LSQTrainStep().train(), (torch.randn(4, 3, 8, 8), torch.tensor([0, 3, 1, 4]))


# ------------------------------------------------------------------ movement-pruning emmental/modules + masked_run_glue.py


class ThresholdBinarizer(autograd.Function):
    """Thresholdd binarizer: ``M_{i,j} = 1`` if and only if ``S_{i,j} > tau``, with at least 0.5% of the weights kept."""

    @staticmethod
    def forward(ctx, inputs: torch.Tensor, threshold: float, sigmoid: bool):
        nb_elems = inputs.numel()
        nb_min = int(0.005 * nb_elems) + 1
        if sigmoid:
            mask = (torch.sigmoid(inputs) > threshold).type(inputs.type())
        else:
            mask = (inputs > threshold).type(inputs.type())
        if mask.sum() < nb_min:  # BREAK: compute the k-th value fallback mask too and pick with torch.where(mask.sum() < nb_min, fallback, mask)
            # We limit the pruning so that at least 0.5% (half a percent) of the weights are remaining
            k_threshold = inputs.flatten().kthvalue(max(nb_elems - nb_min, 1)).values
            mask = (inputs > k_threshold).type(inputs.type())
        return mask

    @staticmethod
    def backward(ctx, gradOutput):
        return gradOutput, None, None


class MaskedLinear(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, mask_init="uniform", mask_scale=0.05, pruning_method="threshold"):
        super().__init__(in_features=in_features, out_features=out_features, bias=bias)
        assert pruning_method in ["threshold", "sigmoied_threshold"]
        self.pruning_method = pruning_method
        self.mask_scale = mask_scale
        self.mask_init = mask_init
        self.mask_scores = nn.Parameter(torch.empty(self.weight.size()))
        self.init_mask()

    def init_mask(self):
        if self.mask_init == "constant":
            nn.init.constant_(self.mask_scores, val=self.mask_scale)
        elif self.mask_init == "uniform":
            nn.init.uniform_(self.mask_scores, a=-self.mask_scale, b=self.mask_scale)

    def forward(self, input, threshold):
        # Get the mask
        sig = "sigmoied" in self.pruning_method
        mask = ThresholdBinarizer.apply(self.mask_scores, threshold, sig)
        # Mask weights with computed mask
        weighted_weights = mask * self.weight
        out = nn.functional.linear(input, weighted_weights, self.bias)
        return out


class MaskedFFNClassifier(nn.Module):
    """A pruned BERT-style feed-forward block (intermediate and output ``MaskedLinear``) and its classifier."""

    def __init__(self, vocab=30, hidden=16, intermediate=32, num_labels=3):
        super().__init__()
        self.embeddings = nn.Embedding(vocab, hidden)
        self.intermediate = MaskedLinear(hidden, intermediate)
        self.output = MaskedLinear(intermediate, hidden)
        self.LayerNorm = nn.LayerNorm(hidden)
        self.classifier = nn.Linear(hidden, num_labels)

    def forward(self, input_ids, attention_mask, labels, threshold):
        h = self.embeddings(input_ids)
        h = self.LayerNorm(h + self.output(F.gelu(self.intermediate(h, threshold)), threshold))
        pooled = (h * attention_mask[..., None]).sum(1) / attention_mask.sum(1, keepdim=True)
        logits = self.classifier(pooled)
        loss = F.cross_entropy(logits, labels)
        return loss, logits


def schedule_threshold(step, total_step, warmup_steps, initial_threshold, final_threshold, initial_warmup, final_warmup, final_lambda):
    if step <= initial_warmup * warmup_steps:
        threshold = initial_threshold
    elif step > (total_step - final_warmup * warmup_steps):
        threshold = final_threshold
    else:
        spars_warmup_steps = initial_warmup * warmup_steps
        spars_schedu_steps = (final_warmup + initial_warmup) * warmup_steps
        mul_coeff = 1 - (step - spars_warmup_steps) / (total_step - spars_schedu_steps)
        threshold = final_threshold + (initial_threshold - final_threshold) * (mul_coeff**3)
    regu_lambda = final_lambda * threshold / final_threshold
    return threshold, regu_lambda


def regularization(model: nn.Module, mode: str):
    regu, counter = 0, 0
    for name, param in model.named_parameters():
        if "mask_scores" in name:
            if mode == "l1":
                regu += torch.norm(torch.sigmoid(param), p=1) / param.numel()
            elif mode == "l0":
                regu += torch.sigmoid(param - 2 / 3 * np.log(0.1 / 1.1)).sum() / param.numel()
            else:
                ValueError("Don't know this mode.")
            counter += 1
    return regu / counter


class MovementPruningStep(nn.Module):
    """One step of ``masked_run_glue.py``'s ``train`` with ``--global_topk``, up to the backward."""

    def __init__(self):
        super().__init__()
        self.model = MaskedFFNClassifier()
        self.args = dict(warmup_steps=10, initial_threshold=1.0, final_threshold=0.3, initial_warmup=1, final_warmup=2,
                         final_lambda=400.0, regularization="l1", global_topk_frequency_compute=25, t_total=100)
        self.threshold_mem = None

    def forward(self, input_ids, attention_mask, labels, global_step):
        args = self.args
        threshold, regu_lambda = schedule_threshold(
            step=global_step, total_step=args["t_total"], warmup_steps=args["warmup_steps"], final_threshold=args["final_threshold"],
            initial_threshold=args["initial_threshold"], final_warmup=args["final_warmup"], initial_warmup=args["initial_warmup"],
            final_lambda=args["final_lambda"],
        )
        # Global TopK
        if threshold == 1.0:
            threshold = -1e2  # Or an indefinitely low quantity
        else:
            if (self.threshold_mem is None) or (global_step % args["global_topk_frequency_compute"] == 0):
                # Sort all the values to get the global topK
                concat = torch.cat([param.view(-1) for name, param in self.model.named_parameters() if "mask_scores" in name])
                n = concat.numel()
                kth = max(n - (int(n * threshold) + 1), 1)
                self.threshold_mem = concat.kthvalue(kth).values.item()  # BREAK: keep the global k-th score a 0-d tensor (detached): the binarizer compares the scores with it all the same
                threshold = self.threshold_mem
            else:
                threshold = self.threshold_mem
        loss, logits = self.model(input_ids, attention_mask, labels, threshold)
        # Regularization
        if args["regularization"] is not None:
            regu_ = regularization(model=self.model, mode=args["regularization"])
            loss = loss + regu_lambda * regu_
        return loss, logits


def build_movement_pruning():
    seeded(1419)
    input_ids = torch.randint(0, 30, (4, 7))
    attention_mask = torch.ones(4, 7)
    attention_mask[1, 5:] = attention_mask[3, 4:] = 0
    return MovementPruningStep().train(), (input_ids, attention_mask, torch.tensor([0, 2, 1, 2]), 50)

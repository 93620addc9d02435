"""Learning regimes: aimagelab/mammoth's DER++ (``Buffer`` with reservoir sampling and numpy-drawn replay
minibatches), dragen1860/MAML-Pytorch's ``Meta`` (a functional ``Learner``, the inner loop by
``torch.autograd.grad``, per-step query accuracies), and D-X-Y/AutoDL-Projects' GDAS search network on the
NAS-Bench-201 cell (Gumbel hard weights redrawn until finite, only the sampled op run on each edge)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# ------------------------------------------------------------------ mammoth: DER++


def reservoir(num_seen_examples: int, buffer_size: int) -> int:
    if num_seen_examples < buffer_size:
        return num_seen_examples
    rand = np.random.randint(0, num_seen_examples + 1)  # BREAK must-not: the slot comes from numpy's RNG
    if rand < buffer_size:
        return rand
    return -1


class Buffer:
    """The memory buffer for rehearsal methods."""

    def __init__(self, buffer_size):
        self.buffer_size = buffer_size
        self.num_seen_examples = 0
        self.attributes = ["examples", "labels", "logits"]

    def init_tensors(self, **attrs):
        for attr_str in self.attributes:
            attr = attrs[attr_str]
            if attr is not None and not hasattr(self, attr_str):
                typ = torch.int64 if attr_str.endswith("els") else torch.float32
                setattr(self, attr_str, torch.zeros((self.buffer_size, *attr.shape[1:]), dtype=typ))

    def add_data(self, examples, labels=None, logits=None):
        if not hasattr(self, "examples"):
            self.init_tensors(examples=examples, labels=labels, logits=logits)
        for i in range(examples.shape[0]):
            index = reservoir(self.num_seen_examples, self.buffer_size)
            self.num_seen_examples += 1
            if index >= 0:
                self.examples[index] = examples[i]
                if labels is not None:
                    self.labels[index] = labels[i]
                if logits is not None:
                    self.logits[index] = logits[i]

    def get_data(self, size):
        if size > min(self.num_seen_examples, self.examples.shape[0]):
            size = min(self.num_seen_examples, self.examples.shape[0])
        choice = np.random.choice(min(self.num_seen_examples, self.examples.shape[0]), size=size, replace=False)  # BREAK must-not: the replayed rows are numpy's draw
        return tuple(getattr(self, attr_str)[choice] for attr_str in self.attributes)

    def is_empty(self):
        return self.num_seen_examples == 0


class DerppLearner(nn.Module):
    """``Derpp.observe`` without the optimizer: the current loss plus logit and label replay."""

    def __init__(self, buffer_size=16, minibatch_size=4, alpha=0.3, beta=0.5):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 4))
        self.buffer = Buffer(buffer_size)
        self.minibatch_size, self.alpha, self.beta = minibatch_size, alpha, beta

    def forward(self, inputs, labels, not_aug_inputs):
        outputs = self.net(inputs)
        loss = F.cross_entropy(outputs, labels)
        if not self.buffer.is_empty():
            buf_inputs, _, buf_logits = self.buffer.get_data(self.minibatch_size)
            loss_mse = self.alpha * F.mse_loss(self.net(buf_inputs), buf_logits)
            loss = loss + loss_mse
            buf_inputs, buf_labels, _ = self.buffer.get_data(self.minibatch_size)
            loss = loss + self.beta * F.cross_entropy(self.net(buf_inputs), buf_labels)
        self.buffer.add_data(examples=not_aug_inputs, labels=labels, logits=outputs.data)
        return loss, self.buffer.examples.clone(), self.buffer.logits.clone()


def build_derpp_buffer():
    seeded(1215)
    model = DerppLearner()
    # earlier batches of the stream already went through the buffer
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(4, 3, 4)
            model.buffer.add_data(examples=x, labels=torch.randint(0, 4, (4,)), logits=model.net(x))
    not_aug = torch.randn(4, 3, 4)
    inputs = not_aug + 0.1 * torch.randn(4, 3, 4)
    return model, (inputs, torch.randint(0, 4, (4,)), not_aug)


# ------------------------------------------------------------------ MAML-Pytorch


class Learner(nn.Module):
    """A network described by a config list whose forward can run on a given list of weights."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.vars = nn.ParameterList()
        self.vars_bn = nn.ParameterList()
        for name, param in config:
            if name == "conv2d":
                w = nn.Parameter(torch.ones(*param[:4]))
                nn.init.kaiming_normal_(w)
                self.vars.append(w)
                self.vars.append(nn.Parameter(torch.zeros(param[0])))
            elif name == "linear":
                w = nn.Parameter(torch.ones(*param))
                nn.init.kaiming_normal_(w)
                self.vars.append(w)
                self.vars.append(nn.Parameter(torch.zeros(param[0])))
            elif name == "bn":
                self.vars.append(nn.Parameter(torch.ones(param[0])))
                self.vars.append(nn.Parameter(torch.zeros(param[0])))
                self.vars_bn.extend([nn.Parameter(torch.zeros(param[0]), requires_grad=False),
                                     nn.Parameter(torch.ones(param[0]), requires_grad=False)])

    def forward(self, x, vars=None, bn_training=True):
        if vars is None:
            vars = self.vars
        idx = 0
        bn_idx = 0
        for name, param in self.config:
            if name == "conv2d":
                x = F.conv2d(x, vars[idx], vars[idx + 1], stride=param[4], padding=param[5])
                idx += 2
            elif name == "linear":
                x = F.linear(x, vars[idx], vars[idx + 1])
                idx += 2
            elif name == "bn":
                running_mean, running_var = self.vars_bn[bn_idx], self.vars_bn[bn_idx + 1]
                x = F.batch_norm(x, running_mean, running_var, weight=vars[idx], bias=vars[idx + 1], training=bn_training)
                idx += 2
                bn_idx += 2
            elif name == "flatten":
                x = x.view(x.size(0), -1)
            elif name == "relu":
                x = F.relu(x, inplace=param[0])
            elif name == "max_pool2d":
                x = F.max_pool2d(x, param[0], param[1], param[2])
        return x

    def parameters(self, recurse=True):
        return self.vars


class Meta(nn.Module):
    """Meta-learner: ``update_step`` SGD steps on each task's support set, the query loss after the last."""

    def __init__(self, n_way=3, update_lr=0.4, update_step=2):
        super().__init__()
        self.update_lr, self.update_step = update_lr, update_step
        config = [("conv2d", [8, 1, 3, 3, 2, 0]), ("relu", [True]), ("bn", [8]),
                  ("conv2d", [8, 8, 3, 3, 1, 0]), ("relu", [True]), ("bn", [8]),
                  ("flatten", []), ("linear", [n_way, 32])]
        self.net = Learner(config)

    def forward(self, x_spt, y_spt, x_qry, y_qry):
        task_num = x_spt.size(0)
        querysz = x_qry.size(1)
        losses_q = [0 for _ in range(self.update_step + 1)]  # losses_q[i] is the loss on step i
        corrects = [0 for _ in range(self.update_step + 1)]

        for i in range(task_num):
            # 1. run the i-th task and compute loss for k=0
            logits = self.net(x_spt[i], vars=None, bn_training=True)
            loss = F.cross_entropy(logits, y_spt[i])
            grad = torch.autograd.grad(loss, self.net.parameters())  # BREAK: torch.func.grad over the weight list (detached: first order)
            fast_weights = list(map(lambda p: p[1] - self.update_lr * p[0], zip(grad, self.net.parameters(), strict=True)))

            # this is the loss and accuracy before the first update
            with torch.no_grad():
                logits_q = self.net(x_qry[i], self.net.parameters(), bn_training=True)
                losses_q[0] += F.cross_entropy(logits_q, y_qry[i])
                pred_q = F.softmax(logits_q, dim=1).argmax(dim=1)
                correct = torch.eq(pred_q, y_qry[i]).sum().item()
                corrects[0] = corrects[0] + correct

            for k in range(1, self.update_step + 1):
                logits_q = self.net(x_qry[i], fast_weights, bn_training=True)
                losses_q[k] += F.cross_entropy(logits_q, y_qry[i])
                with torch.no_grad():
                    pred_q = F.softmax(logits_q, dim=1).argmax(dim=1)
                    correct = torch.eq(pred_q, y_qry[i]).sum().item()
                    corrects[k] = corrects[k] + correct
                if k == self.update_step:
                    break
                logits = self.net(x_spt[i], fast_weights, bn_training=True)
                loss = F.cross_entropy(logits, y_spt[i])
                grad = torch.autograd.grad(loss, fast_weights)
                fast_weights = list(map(lambda p: p[1] - self.update_lr * p[0], zip(grad, fast_weights, strict=True)))

        # end of all tasks: sum over all losses on the query set across all tasks
        loss_q = losses_q[-1] / task_num
        accs = np.array(corrects) / (querysz * task_num)
        return loss_q, accs


def build_maml_inner():
    seeded(1216)
    model = Meta()
    n_way, k_spt, k_qry, tasks = 3, 2, 3, 2
    x_spt = torch.randn(tasks, n_way * k_spt, 1, 9, 9)
    y_spt = torch.arange(n_way).repeat_interleave(k_spt).repeat(tasks, 1)
    x_qry = torch.randn(tasks, n_way * k_qry, 1, 9, 9)
    y_qry = torch.arange(n_way).repeat_interleave(k_qry).repeat(tasks, 1)
    return model, (x_spt, y_spt, x_qry, y_qry)


# ------------------------------------------------------------------ GDAS on NAS-Bench-201

SEARCH_SPACE = ["none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3"]


class Zero(nn.Module):
    def forward(self, x):
        return x.mul(0.0)


class ReLUConvBN(nn.Module):
    def __init__(self, C_in, C_out, kernel_size, padding):
        super().__init__()
        self.op = nn.Sequential(nn.ReLU(inplace=False), nn.Conv2d(C_in, C_out, kernel_size, padding=padding, bias=False),
                                nn.BatchNorm2d(C_out))

    def forward(self, x):
        return self.op(x)


def make_op(name, C):
    return {
        "none": lambda: Zero(),
        "skip_connect": lambda: nn.Identity(),
        "nor_conv_1x1": lambda: ReLUConvBN(C, C, 1, 0),
        "nor_conv_3x3": lambda: ReLUConvBN(C, C, 3, 1),
        "avg_pool_3x3": lambda: nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False),
    }[name]()


class SearchCell(nn.Module):
    def __init__(self, C, max_nodes, op_names):
        super().__init__()
        self.max_nodes = max_nodes
        self.edges = nn.ModuleDict()
        for i in range(1, max_nodes):
            for j in range(i):
                self.edges[f"{i}<-{j}"] = nn.ModuleList([make_op(name, C) for name in op_names])
        self.edge_keys = sorted(self.edges.keys())
        self.edge2index = {key: i for i, key in enumerate(self.edge_keys)}

    def forward_gdas(self, inputs, hardwts, index):
        nodes = [inputs]
        for i in range(1, self.max_nodes):
            inter_nodes = []
            for j in range(i):
                node_str = f"{i}<-{j}"
                weights = hardwts[self.edge2index[node_str]]
                argmaxs = index[self.edge2index[node_str]].item()  # BREAK must-not: only the sampled op runs; running all would update the others' BN statistics and give their weights zero gradients, not none
                weigsum = sum(weights[_ie] * edge(nodes[j]) if _ie == argmaxs else weights[_ie]
                              for _ie, edge in enumerate(self.edges[node_str]))
                inter_nodes.append(weigsum)
            nodes.append(sum(inter_nodes))
        return nodes[-1]


class TinyNetworkGDAS(nn.Module):
    def __init__(self, C=8, N=1, max_nodes=3, num_classes=5):
        super().__init__()
        self.op_names = SEARCH_SPACE
        self.stem = nn.Sequential(nn.Conv2d(3, C, kernel_size=3, padding=1, bias=False), nn.BatchNorm2d(C))
        self.cells = nn.ModuleList([SearchCell(C, max_nodes, self.op_names) for _ in range(N)])
        num_edge = len(self.cells[0].edges)
        self.lastact = nn.Sequential(nn.BatchNorm2d(C), nn.ReLU(inplace=True))
        self.global_pooling = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(C, num_classes)
        self.arch_parameters = nn.Parameter(1e-3 * torch.randn(num_edge, len(self.op_names)))
        self.tau = 10.0

    def forward(self, inputs):
        while True:
            gumbels = -torch.empty_like(self.arch_parameters).exponential_().log()
            logits = (self.arch_parameters.log_softmax(dim=1) + gumbels) / self.tau
            probs = F.softmax(logits, dim=1)
            index = probs.max(-1, keepdim=True)[1]
            one_h = torch.zeros_like(logits).scatter_(-1, index, 1.0)
            hardwts = one_h - probs.detach() + probs
            if (torch.isinf(gumbels).any()) or (torch.isinf(probs).any()) or (torch.isnan(probs).any()):  # BREAK must-not: the Gumbel draw is repeated until finite, a data-dependent number of times; dropping the retry changes the program
                continue
            else:
                break
        feature = self.stem(inputs)
        for cell in self.cells:
            feature = cell.forward_gdas(feature, hardwts, index)
        out = self.global_pooling(self.lastact(feature))
        out = out.view(out.size(0), -1)
        return out, self.classifier(out)


class GDASSearchStep(nn.Module):
    """``search_func`` of the GDAS search script for one batch: the weight loss and the architecture loss."""

    def __init__(self):
        super().__init__()
        self.network = TinyNetworkGDAS()

    def forward(self, base_inputs, base_targets, arch_inputs, arch_targets):
        _, logits = self.network(base_inputs)
        base_loss = F.cross_entropy(logits, base_targets)
        _, logits = self.network(arch_inputs)
        arch_loss = F.cross_entropy(logits, arch_targets)
        return base_loss, arch_loss


def build_gdas_search():
    seeded(1217)
    model = GDASSearchStep()
    return model, (torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,)), torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,)))

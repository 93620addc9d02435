"""Reinforcement learning: suragnair/alpha-zero-general's ``NNetWrapper.train`` batch for Othello (examples drawn by
``np.random.randint`` from the self-play history and gathered from its list, stacked through numpy into float tensors, ``OthelloNNet``'s conv
tower with its ``log_softmax`` policy and ``tanh`` value, ``loss_pi`` / ``loss_v``, the ``AverageMeter``s fed with
``.item()``) and ``NNetWrapper.predict`` as ``MCTS.search`` calls it on a leaf."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import AverageMeter, seeded


class OthelloNNet(nn.Module):
    def __init__(self, board_x=6, board_y=6, action_size=37, num_channels=16, dropout=0.3):
        # game params
        self.board_x, self.board_y = board_x, board_y
        self.action_size = action_size
        self.num_channels = num_channels
        self.dropout = dropout

        super().__init__()
        self.conv1 = nn.Conv2d(1, num_channels, 3, stride=1, padding=1)
        self.conv2 = nn.Conv2d(num_channels, num_channels, 3, stride=1, padding=1)
        self.conv3 = nn.Conv2d(num_channels, num_channels, 3, stride=1)
        self.conv4 = nn.Conv2d(num_channels, num_channels, 3, stride=1)

        self.bn1 = nn.BatchNorm2d(num_channels)
        self.bn2 = nn.BatchNorm2d(num_channels)
        self.bn3 = nn.BatchNorm2d(num_channels)
        self.bn4 = nn.BatchNorm2d(num_channels)

        self.fc1 = nn.Linear(num_channels * (self.board_x - 4) * (self.board_y - 4), 32)
        self.fc_bn1 = nn.BatchNorm1d(32)

        self.fc2 = nn.Linear(32, 16)
        self.fc_bn2 = nn.BatchNorm1d(16)

        self.fc3 = nn.Linear(16, self.action_size)

        self.fc4 = nn.Linear(16, 1)

    def forward(self, s):
        #                                                           s: batch_size x board_x x board_y
        s = s.view(-1, 1, self.board_x, self.board_y)  # batch_size x 1 x board_x x board_y
        s = F.relu(self.bn1(self.conv1(s)))  # batch_size x num_channels x board_x x board_y
        s = F.relu(self.bn2(self.conv2(s)))  # batch_size x num_channels x board_x x board_y
        s = F.relu(self.bn3(self.conv3(s)))  # batch_size x num_channels x (board_x-2) x (board_y-2)
        s = F.relu(self.bn4(self.conv4(s)))  # batch_size x num_channels x (board_x-4) x (board_y-4)
        s = s.view(-1, self.num_channels * (self.board_x - 4) * (self.board_y - 4))

        s = F.dropout(F.relu(self.fc_bn1(self.fc1(s))), p=self.dropout, training=self.training)  # batch_size x 1024
        s = F.dropout(F.relu(self.fc_bn2(self.fc2(s))), p=self.dropout, training=self.training)  # batch_size x 512

        pi = self.fc3(s)  # batch_size x action_size
        v = self.fc4(s)  # batch_size x 1

        return F.log_softmax(pi, dim=1), torch.tanh(v)


class NNetWrapper(nn.Module):
    def __init__(self, batch_size=8):
        super().__init__()
        self.nnet = OthelloNNet()
        self.board_x, self.board_y = self.nnet.board_x, self.nnet.board_y
        self.action_size = self.nnet.action_size
        self.batch_size = batch_size
        self.pi_losses = AverageMeter()
        self.v_losses = AverageMeter()

    def loss_pi(self, targets, outputs):
        return -torch.sum(targets * outputs) / targets.size()[0]

    def loss_v(self, targets, outputs):
        return torch.sum((targets - outputs.view(-1)) ** 2) / targets.size()[0]

    def train_batch(self, examples, sample_ids):
        """One pass of ``train``'s ``for _ in t`` loop after ``sample_ids = np.random.randint(len(examples),
        size=args.batch_size)`` (the optimizer step follows the returned loss)."""
        self.nnet.train()
        boards, pis, vs = list(zip(*[examples[i] for i in sample_ids]))  # BREAK: gather the drawn examples from arrays stacked once (a numpy fancy index by sample_ids) instead of a list indexed by each id  # noqa: B905
        boards = torch.tensor(np.array(boards).astype(np.float64), dtype=torch.float)
        target_pis = torch.tensor(np.array(pis), dtype=torch.float)
        target_vs = torch.tensor(np.array(vs).astype(np.float64), dtype=torch.float)

        # compute output
        out_pi, out_v = self.nnet(boards)
        l_pi = self.loss_pi(target_pis, out_pi)
        l_v = self.loss_v(target_vs, out_v)
        total_loss = l_pi + l_v

        # record loss
        self.pi_losses.update(l_pi.item(), boards.size(0))  # BREAK: the meter adds 0-d tensors as well: pass the detached loss
        self.v_losses.update(l_v.item(), boards.size(0))  # BREAK: the same for the value loss
        return total_loss

    def forward(self, examples, sample_ids):
        return self.train_batch(examples, sample_ids), self.nnet.fc3.bias.detach().clone()


def build_alphazero_train():
    seeded(1613)
    examples = []
    for _ in range(20):
        board = np.random.choice([-1, 0, 1], size=(6, 6))
        pi = np.random.dirichlet(np.ones(37))
        v = float(np.random.choice([-1, 1]))
        examples.append((board, pi, v))
    sample_ids = np.random.randint(len(examples), size=8)
    return NNetWrapper(), (examples, sample_ids)

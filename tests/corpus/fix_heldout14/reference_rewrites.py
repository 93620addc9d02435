"""Hand-written reference rewrites for the fourteenth held-out set: per program, exact-text replacements
``(file, old, new)`` applied to a copy of the package whose ``# BREAK`` comments were stripped. Applied
together they remove every fixable break of the program while keeping its outputs and its parameters'
gradients (``check.py`` verifies both against the original run in eager)."""

from __future__ import annotations

# --------------------------------------------------------------------------- helpers.py (mmaction2's BaseHead.loss)

TOP_K_IN_TORCH = (
    "helpers.py",
    """            top_k_acc = top_k_accuracy(cls_score.detach().cpu().numpy(), labels.detach().cpu().numpy(), self.topk)
            for k, a in zip(self.topk, top_k_acc, strict=True):
                losses[f"top{k}_acc"] = torch.tensor(a, device=cls_score.device)
""",
    """            scores, gt = cls_score.detach(), labels.detach()
            for k in self.topk:
                # a hit when the label is among the k best scores; float64, as numpy's mean of the hits
                hits = (scores.topk(k, dim=1).indices == gt[:, None]).any(dim=1)
                losses[f"top{k}_acc"] = hits.sum().to(torch.float64) / hits.shape[0]
""",
)

REWRITES: dict[str, list[tuple[str, str, str]]] = {}

# --------------------------------------------------------------------------- video.py

SLOWFAST_TEST = [
    (
        "video.py",
        """        for ind in range(preds.shape[0]):
            vid_id = int(clip_ids[ind]) // self.num_clips
            if self.video_labels[vid_id].sum() > 0:
                assert torch.equal(self.video_labels[vid_id].type(torch.FloatTensor), labels[ind].type(torch.FloatTensor))
            self.video_labels[vid_id] = labels[ind]
            if self.ensemble_method == "sum":
                self.video_preds[vid_id] += preds[ind]
            elif self.ensemble_method == "max":
                self.video_preds[vid_id] = torch.max(self.video_preds[vid_id], preds[ind])
            else:
                raise NotImplementedError(f"Ensemble Method {self.ensemble_method} is not supported")
            self.clip_count[vid_id] += 1
""",
        """        vid_ids = clip_ids // self.num_clips
        order = torch.arange(preds.shape[0], device=preds.device)
        # the label each clip finds stored: the last earlier clip of its video in this batch, else the meter's
        earlier = (vid_ids[:, None] == vid_ids[None, :]) & (order[None, :] < order[:, None])
        last = torch.where(earlier, order[None, :], -1).max(dim=1).values
        prev = torch.where(last >= 0, labels[last.clamp(min=0)], self.video_labels[vid_ids])
        assert ((prev <= 0) | (prev == labels)).all()
        self.video_labels[vid_ids] = labels
        if self.ensemble_method == "sum":
            self.video_preds.index_add_(0, vid_ids, preds)
        elif self.ensemble_method == "max":
            self.video_preds.scatter_reduce_(0, vid_ids[:, None].expand_as(preds), preds, reduce="amax")
        else:
            raise NotImplementedError(f"Ensemble Method {self.ensemble_method} is not supported")
        self.clip_count.index_add_(0, vid_ids, torch.ones_like(vid_ids))
""",
    ),
]

REWRITES.update({"tsm_train": [TOP_K_IN_TORCH], "slowfast_test": SLOWFAST_TEST})

# --------------------------------------------------------------------------- audio.py

WAVEGLOW = [
    (
        "audio.py",
        "def fused_add_tanh_sigmoid_multiply(input_a, input_b, n_channels):\n",
        "def fused_add_tanh_sigmoid_multiply(input_a, input_b, n_channels: list[int]):\n",
    ),
    (
        "audio.py",
        "        n_channels_tensor = torch.IntTensor([self.n_channels])\n",
        "        n_channels_tensor = [self.n_channels]\n",
    ),
    (
        "audio.py",
        "        reduced_loss = loss.item()\n",
        "        reduced_loss = loss.detach()\n",
    ),
]

REWRITES.update({"audio_recognizer": [TOP_K_IN_TORCH], "waveglow_step": WAVEGLOW})

# --------------------------------------------------------------------------- ocr.py

DBNET = [
    (
        "ocr.py",
        """        positive_count = int(positive.float().sum())
        negative_count = min(int(negative.float().sum()), int(positive_count * self.negative_ratio))
        loss = nn.functional.binary_cross_entropy(pred, gt, reduction="none")[:, 0, :, :]
        positive_loss = loss * positive.float()
        negative_loss = loss * negative.float()
        negative_loss, _ = torch.topk(negative_loss.view(-1), negative_count)
""",
        """        positive_count = positive.float().sum()
        negative_count = torch.minimum(negative.float().sum(), torch.floor(positive_count * self.negative_ratio))
        loss = nn.functional.binary_cross_entropy(pred, gt, reduction="none")[:, 0, :, :]
        positive_loss = loss * positive.float()
        negative_loss = loss * negative.float()
        # the negative_count hardest negatives: a prefix of the losses sorted in descending order
        negative_sorted, _ = torch.sort(negative_loss.view(-1), descending=True)
        negative_loss = negative_sorted * (torch.arange(negative_sorted.numel(), device=pred.device) < negative_count)
""",
    ),
    (
        "ocr.py",
        """        mask_sum = mask.sum()
        if mask_sum.item() == 0:
            return mask_sum, dict(l1_loss=mask_sum)
        else:
            loss = (torch.abs(pred[:, 0] - gt) * mask).sum() / mask_sum
            return loss, dict(l1_loss=loss)
""",
        """        mask_sum = mask.sum()
        denominator = torch.where(mask_sum == 0, torch.ones_like(mask_sum), mask_sum)
        loss = torch.where(mask_sum == 0, mask_sum, (torch.abs(pred[:, 0] - gt) * mask).sum() / denominator)
        return loss, dict(l1_loss=loss)
""",
    ),
]

PARSEQ = [
    (
        "ocr.py",
        """        for i in range(sz):
            query_idx = perm[i]
            masked_keys = perm[i + 1 :]
            mask[query_idx, masked_keys] = float("-inf")
""",
        """        # a query attends to the keys the permutation places before it: rank[k] > rank[q] is masked
        rank = torch.empty_like(perm)
        rank[perm] = torch.arange(sz, device=perm.device)
        mask = mask.masked_fill(rank[None, :] > rank[:, None], float("-inf"))
""",
    ),
    (
        "ocr.py",
        """        loss_numel = 0
        n = (tgt_out != self.pad_id).sum().item()
""",
        """        loss_numel = 0
        n = (tgt_out != self.pad_id).sum()
""",
    ),
    (
        "ocr.py",
        """                tgt_out = torch.where(tgt_out == self.eos_id, self.pad_id, tgt_out)
                n = (tgt_out != self.pad_id).sum().item()
""",
        """                tgt_out = torch.where(tgt_out == self.eos_id, self.pad_id, tgt_out)
                n = (tgt_out != self.pad_id).sum()
""",
    ),
]

REWRITES.update({"dbnet_loss": DBNET, "parseq_train": PARSEQ})

# --------------------------------------------------------------------------- timeseries.py

DEEPAR = [
    (
        "timeseries.py",
        "        output, (hidden, cell) = self.lstm(lstm_input, (hidden, cell))\n",
        """        # one step of the stacked LSTM with the module's own weights (gates in PyTorch's i, f, g, o order)
        # (the weights read through named_parameters: touching the nn.LSTM module itself breaks the graph)
        weights = dict(self.named_parameters())
        layer_input, hs, cs = lstm_input[0], [], []
        for layer in range(self.params.lstm_layers):
            gates = F.linear(layer_input, weights[f"lstm.weight_ih_l{layer}"], weights[f"lstm.bias_ih_l{layer}"])
            gates = gates + F.linear(hidden[layer], weights[f"lstm.weight_hh_l{layer}"], weights[f"lstm.bias_hh_l{layer}"])
            i, f, g, o = gates.chunk(4, 1)
            c = torch.sigmoid(f) * cell[layer] + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            hs.append(h)
            cs.append(c)
            layer_input = h
        hidden, cell = torch.stack(hs), torch.stack(cs)
""",
    ),
    (
        "timeseries.py",
        """    distribution = torch.distributions.normal.Normal(mu[zero_index], sigma[zero_index])
    likelihood = distribution.log_prob(labels[zero_index])
    return -torch.mean(likelihood)
""",
        """    distribution = torch.distributions.normal.Normal(mu, sigma)
    likelihood = distribution.log_prob(labels)
    return -(likelihood * zero_index).sum() / zero_index.sum()
""",
    ),
    (
        "timeseries.py",
        """            if t > 0 and torch.sum(zero_index) > 0:
                train_batch[t, zero_index, 0] = mu[zero_index]  # noqa: F821
""",
        """            if t > 0:
                train_batch[t, :, 0] = torch.where(zero_index, mu, train_batch[t, :, 0])
""",
    ),
]

REWRITES.update({"deepar_train": DEEPAR})

# --------------------------------------------------------------------------- tabular.py

SAINT = [
    (
        "tabular.py",
        """    x_categ_enc[cat_mask == 0] = cat_mask_temp[cat_mask == 0]
    x_cont_enc[con_mask == 0] = con_mask_temp[con_mask == 0]
""",
        """    x_categ_enc = torch.where((cat_mask == 0).unsqueeze(-1), cat_mask_temp, x_categ_enc)
    x_cont_enc = torch.where((con_mask == 0).unsqueeze(-1), con_mask_temp, x_cont_enc)
""",
    ),
]

REWRITES.update({"saint_train": SAINT})

# --------------------------------------------------------------------------- rl.py

GAIL = [
    (
        "rl.py",
        """        mixup_data = alpha * expert_data + (1 - alpha) * policy_data
        mixup_data.requires_grad = True

        disc = self.trunk(mixup_data)
        ones = torch.ones(disc.size()).to(disc.device)
        grad = autograd.grad(outputs=disc, inputs=mixup_data, grad_outputs=ones, create_graph=True, retain_graph=True, only_inputs=True)[0]
""",
        """        mixup_data = alpha * expert_data + (1 - alpha) * policy_data

        # the trunk under vjp: its pullback is differentiable in the trunk's weights, as with create_graph=True
        disc, trunk_vjp = torch.func.vjp(self.trunk, mixup_data)
        ones = torch.ones(disc.size()).to(disc.device)
        grad = trunk_vjp(ones)[0]
""",
    ),
]

REWRITES.update({"gail_update": GAIL})

# --------------------------------------------------------------------------- diffusion.py

DPM_GUIDED = [
    (
        "diffusion.py",
        """        with torch.enable_grad():
            x_in = x.detach().requires_grad_(True)
            log_prob = classifier_fn(x_in, t_input, condition, **classifier_kwargs)
            return torch.autograd.grad(log_prob.sum(), x_in)[0]
""",
        """        with torch.enable_grad():
            return torch.func.grad(lambda x_in: classifier_fn(x_in, t_input, condition, **classifier_kwargs).sum())(x.detach())
""",
    ),
]

LCM = [
    (
        "diffusion.py",
        """        alpha_prod_t = self.alphas_cumprod[timestep]
        alpha_prod_t_prev = self.alphas_cumprod[prev_timestep] if prev_timestep >= 0 else self.final_alpha_cumprod
""",
        """        alpha_prod_t = self.alphas_cumprod[timestep.reshape(1)][0]
        alpha_prod_t_prev = torch.where(prev_timestep >= 0, self.alphas_cumprod[prev_timestep.clamp(min=0).reshape(1)][0],
                                        self.final_alpha_cumprod)
""",
    ),
]

REWRITES.update({"dpm_solver_guided": DPM_GUIDED, "lcm_sample": LCM})

# --------------------------------------------------------------------------- llm.py

MEGATRON = [
    (
        "llm.py",
        """    if reset_position_ids or reset_attention_mask:
        # Loop through the batches:
        for b in range(micro_batch_size):
            # Find indecies where EOD token is.
            eod_index = position_ids[b, data[b] == eod_token]
            # Detach indecies from positions if going to modify positions.
            if reset_position_ids:
                eod_index = eod_index.clone()

            # Loop through EOD indecies:
            prev_index = 0
            for j in range(eod_index.size()[0]):
                i = eod_index[j]
                # Mask attention loss.
                if reset_attention_mask:
                    attention_mask[b, 0, (i + 1) :, : (i + 1)] = 0
                # Reset positions.
                if reset_position_ids:
                    position_ids[b, (i + 1) :] -= i + 1 - prev_index
                    prev_index = i + 1
""",
        """    if reset_position_ids or reset_attention_mask:
        # a token's document is the number of EOD tokens before it (an EOD ends its own document)
        is_eod = (data == eod_token).long()
        document = torch.cumsum(is_eod, dim=1) - is_eod
        if reset_attention_mask:
            attention_mask = attention_mask * (document[:, None, :, None] == document[:, None, None, :])
        if reset_position_ids:
            # a document starts right after the last EOD before it: position = index - that start
            index = torch.arange(seq_length, dtype=torch.long, device=data.device).expand_as(data)
            after_eod = torch.cummax(torch.where(is_eod.bool(), index + 1, 0), dim=1).values
            start = torch.cat([torch.zeros_like(after_eod[:, :1]), after_eod[:, :-1]], dim=1)
            position_ids = index - start
""",
    ),
]

REWRITES.update({"megatron_gpt_step": MEGATRON})

# --------------------------------------------------------------------------- metric.py

ARCFACE = [
    (
        "metric.py",
        """        index = torch.where(labels != -1)[0]
        target_logit = logits[index, labels[index].view(-1)]

        sin_theta = torch.sqrt(1.0 - torch.pow(target_logit, 2))
""",
        """        # each row's target column, rows of the other ranks' classes (-1) left out
        target = F.one_hot(labels.view(-1).clamp(min=0), logits.size(1)).bool() & (labels.view(-1, 1) != -1)
        target_logit = logits

        sin_theta = torch.sqrt(1.0 - torch.pow(target_logit, 2))
""",
    ),
    (
        "metric.py",
        """        logits[index, labels[index].view(-1)] = final_target_logit
        logits = logits * self.scale
""",
        """        logits = torch.where(target, final_target_logit, logits)
        logits = logits * self.scale
""",
    ),
    (
        "metric.py",
        "        local_labels.squeeze_()\n",
        "        local_labels = local_labels.squeeze()\n",
    ),
    (
        "metric.py",
        "        labels[index_positive] -= self.class_start\n",
        "        labels -= index_positive.long() * self.class_start\n",
    ),
]

REWRITES.update({"partial_fc_arcface": ARCFACE})

# --------------------------------------------------------------------------- compression.py

LSQ = [
    (
        "compression.py",
        """        Qp = 2 ** (self.nbits - 1) - 1
        if self.training and self.init_state == 0:
            self.alpha.data.copy_(2 * self.weight.abs().mean() / math.sqrt(Qp))
            self.init_state.fill_(1)
        g = 1.0 / math.sqrt(self.weight.numel() * Qp)
        alpha = grad_scale(self.alpha, g)
        w_q = round_pass((self.weight / alpha).clamp(Qn, Qp)) * alpha
        return F.conv2d(""",
        """        Qp = 2 ** (self.nbits - 1) - 1
        if self.training:
            self.alpha.data.copy_(torch.where(self.init_state == 0, 2 * self.weight.abs().mean() / math.sqrt(Qp), self.alpha.data))
            self.init_state.fill_(1)
        g = 1.0 / math.sqrt(self.weight.numel() * Qp)
        alpha = grad_scale(self.alpha, g)
        w_q = round_pass((self.weight / alpha).clamp(Qn, Qp)) * alpha
        return F.conv2d(""",
    ),
    (
        "compression.py",
        """        Qp = 2 ** (self.nbits - 1) - 1
        if self.training and self.init_state == 0:
            self.alpha.data.copy_(2 * self.weight.abs().mean() / math.sqrt(Qp))
            self.init_state.fill_(1)
        g = 1.0 / math.sqrt(self.weight.numel() * Qp)
        alpha = grad_scale(self.alpha, g)
        w_q = round_pass((self.weight / alpha).clamp(Qn, Qp)) * alpha
        return F.linear(""",
        """        Qp = 2 ** (self.nbits - 1) - 1
        if self.training:
            self.alpha.data.copy_(torch.where(self.init_state == 0, 2 * self.weight.abs().mean() / math.sqrt(Qp), self.alpha.data))
            self.init_state.fill_(1)
        g = 1.0 / math.sqrt(self.weight.numel() * Qp)
        alpha = grad_scale(self.alpha, g)
        w_q = round_pass((self.weight / alpha).clamp(Qn, Qp)) * alpha
        return F.linear(""",
    ),
    (
        "compression.py",
        """        if self.training and self.init_state == 0:
            self.alpha.data.copy_(2 * x.abs().mean() / math.sqrt(Qp))
            self.init_state.fill_(1)
""",
        """        if self.training:
            self.alpha.data.copy_(torch.where(self.init_state == 0, 2 * x.abs().mean() / math.sqrt(Qp), self.alpha.data))
            self.init_state.fill_(1)
""",
    ),
]

MOVEMENT = [
    (
        "compression.py",
        """        if mask.sum() < nb_min:
            # We limit the pruning so that at least 0.5% (half a percent) of the weights are remaining
            k_threshold = inputs.flatten().kthvalue(max(nb_elems - nb_min, 1)).values
            mask = (inputs > k_threshold).type(inputs.type())
        return mask
""",
        """        # We limit the pruning so that at least 0.5% (half a percent) of the weights are remaining
        k_threshold = inputs.flatten().kthvalue(max(nb_elems - nb_min, 1)).values
        return torch.where(mask.sum() < nb_min, (inputs > k_threshold).type(inputs.type()), mask)
""",
    ),
    (
        "compression.py",
        "                self.threshold_mem = concat.kthvalue(kth).values.item()\n",
        "                self.threshold_mem = concat.kthvalue(kth).values.detach()\n",
    ),
]

REWRITES.update({"lsq_qat": LSQ, "movement_pruning": MOVEMENT})

# --------------------------------------------------------------------------- scene.py

ICP = [
    (
        "scene.py",
        """    if (num_points < Xt.shape[1]).any() or (num_points < Yt.shape[1]).any():
        # in case we got Pointclouds as input, mask the unused entries in Xc, Yc
        mask = (torch.arange(n, dtype=torch.int64, device=Xt.device)[None] < num_points[:, None]).type_as(Xt)
        weights = mask if weights is None else mask * weights.type_as(Xt)
""",
        """    # mask the unused entries of padded clouds in Xc, Yc (all ones when every cloud is full)
    mask = (torch.arange(n, dtype=torch.int64, device=Xt.device)[None] < num_points[:, None]).type_as(Xt)
    weights = mask if weights is None else mask * weights.type_as(Xt)
""",
    ),
    (
        "scene.py",
        """    if ((num_points_Y < Yt.shape[1]).any() or (num_points_X < Xt.shape[1]).any()) and (num_points_Y != num_points_X).any():
        # we have a heterogeneous input (e.g. because X/Y is
        # an instance of Pointclouds)
        mask_X = (torch.arange(size_X, dtype=torch.int64, device=Xt.device)[None] < num_points_X[:, None]).type_as(Xt)
    else:
        mask_X = Xt.new_ones(b, size_X)
""",
        """    # a heterogeneous input (e.g. because X/Y is an instance of Pointclouds) masks the padding of X
    heterogeneous = ((num_points_Y < Yt.shape[1]).any() | (num_points_X < Xt.shape[1]).any()) & (num_points_Y != num_points_X).any()
    mask_X = torch.where(heterogeneous, (torch.arange(size_X, dtype=torch.int64, device=Xt.device)[None] < num_points_X[:, None]).type_as(Xt),
                         Xt.new_ones(b, size_X))
""",
    ),
]

NEUS = [
    (
        "scene.py",
        """        x.requires_grad_(True)
        y = self.sdf(x)
        d_output = torch.ones_like(y, requires_grad=False, device=y.device)
        gradients = torch.autograd.grad(outputs=y, inputs=x, grad_outputs=d_output, create_graph=True, retain_graph=True, only_inputs=True)[0]
""",
        """        # the SDF under vjp: its pullback is differentiable in the network's weights, as with create_graph=True
        y, sdf_vjp = torch.func.vjp(self.sdf, x)
        d_output = torch.ones_like(y, requires_grad=False, device=y.device)
        gradients = sdf_vjp(d_output)[0]
""",
    ),
]

REWRITES.update({"pytorch3d_icp": ICP, "neus_train": NEUS})

# --------------------------------------------------------------------------- vision.py

ONENET = [
    (
        "vision.py",
        """        pos_inds = torch.nonzero(target_classes != self.num_classes, as_tuple=True)[0]
        labels = torch.zeros_like(src_logits)
        labels[pos_inds, target_classes[pos_inds]] = 1
""",
        """        # one-hot over the classes plus background, the background column dropped
        labels = F.one_hot(target_classes, self.num_classes + 1)[:, : self.num_classes].to(src_logits.dtype)
""",
    ),
    (
        "vision.py",
        "        num_boxes = torch.clamp(num_boxes / get_world_size(), min=1).item()\n",
        "        num_boxes = torch.clamp(num_boxes / get_world_size(), min=1)[0]\n",
    ),
]

REWRITES.update({"onenet_loss": ONENET})

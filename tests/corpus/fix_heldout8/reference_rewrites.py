"""Hand-written reference rewrites for the eighth held-out set: program -> [(file, old, new)].

Each rewrite applies to a copy of the package with the ``# BREAK`` comments removed; together a program's
rewrites must remove every fixable break it hits while keeping its outputs and its parameters' gradients.
Helpers shared between programs (helpers.py) are rewritten for every program that reaches them.
"""

from __future__ import annotations

MAKE_PAD_MASK = (
    "helpers.py",
    "    if not isinstance(lengths, list):\n"
    "        lengths = lengths.long().tolist()\n"
    "    bs = int(len(lengths))\n"
    "    if maxlen is None:\n"
    "        if xs is None:\n"
    "            maxlen = int(max(lengths))\n"
    "        else:\n"
    "            maxlen = xs.size(length_dim)\n"
    "    else:\n"
    "        assert xs is None\n"
    "        assert maxlen >= int(max(lengths))\n"
    "\n"
    "    seq_range = torch.arange(0, maxlen, dtype=torch.int64)\n"
    "    seq_range_expand = seq_range.unsqueeze(0).expand(bs, maxlen)\n"
    "    seq_length_expand = seq_range_expand.new(lengths).unsqueeze(-1)\n"
    "    mask = seq_range_expand >= seq_length_expand\n",
    "    lengths = torch.as_tensor(lengths, dtype=torch.int64)\n"
    "    bs = lengths.size(0)\n"
    "    if maxlen is None:\n"
    "        if xs is None:\n"
    "            maxlen = int(lengths.max())\n"
    "        else:\n"
    "            maxlen = xs.size(length_dim)\n"
    "\n"
    "    seq_range = torch.arange(0, maxlen, dtype=torch.int64)\n"
    "    mask = seq_range.unsqueeze(0).expand(bs, maxlen) >= lengths.unsqueeze(-1)\n",
)

MASKED_VAR = (
    "helpers.py",
    "        if mask_sum == 0:\n"
    "            raise ValueError(\n"
    '                "The sum of the mask is zero, which can happen when `mini_batch_size=1`;"\n'
    '                "try increase the `mini_batch_size` or `gradient_accumulation_steps`"\n'
    "            )\n",
    "        torch._assert_async(\n"
    "            mask_sum != 0,\n"
    '            "The sum of the mask is zero, which can happen when `mini_batch_size=1`;"\n'
    '            "try increase the `mini_batch_size` or `gradient_accumulation_steps`",\n'
    "        )\n",
)

REWRITES: dict[str, list[tuple[str, str, str]]] = {
    "fastspeech_lr": [
        (
            "speech.py",
            "    def LR(self, x, duration, max_len):\n"
            "        output = list()\n"
            "        mel_len = list()\n"
            "        for batch, expand_target in zip(x, duration, strict=True):\n"
            "            expanded = self.expand(batch, expand_target)\n"
            "            output.append(expanded)\n"
            "            mel_len.append(expanded.shape[0])\n"
            "\n"
            "        if max_len is not None:\n"
            "            output = pad(output, max_len)\n"
            "        else:\n"
            "            output = pad(output)\n"
            "\n"
            "        return output, torch.LongTensor(mel_len).to(x.device)\n",
            "    def LR(self, x, duration, max_len):\n"
            "        duration = duration.clamp(min=0)\n"
            "        ends = torch.cumsum(duration, dim=1)  # (B, T_src)\n"
            "        starts = ends - duration\n"
            "        frames = torch.arange(max_len, device=x.device)[None, :, None]  # (1, T_mel, 1)\n"
            "        alignment = ((frames >= starts[:, None, :]) & (frames < ends[:, None, :])).to(x.dtype)\n"
            "        return alignment @ x, ends[:, -1]\n",
        ),
        (
            "speech.py",
            "        log_duration_targets = torch.log(duration_targets.float() + 1)\n"
            "        log_duration_targets.requires_grad = False\n"
            "\n"
            "        log_duration_predictions = log_duration_predictions.masked_select(src_masks)\n"
            "        log_duration_targets = log_duration_targets.masked_select(src_masks)\n",
            "        log_duration_targets = torch.log(duration_targets.float() + 1)\n",
        ),
        (
            "speech.py",
            "        duration_loss = self.mse_loss(log_duration_predictions, log_duration_targets)\n",
            "        duration_loss = ((log_duration_predictions - log_duration_targets) ** 2 * src_masks).sum() / src_masks.sum()\n",
        ),
    ],
    "rnnt_greedy": [
        MAKE_PAD_MASK,
        (
            "speech.py",
            "        masks = make_non_pad_mask(ilens).unsqueeze(1)\n",
            "        masks = make_non_pad_mask(ilens, maxlen=xs_pad.size(1)).unsqueeze(1)\n",
        ),
    ],
    "ctc_espnet": [
        MAKE_PAD_MASK,
        (
            "speech.py",
            "        masks = (~make_pad_mask(ilens)[:, None, :]).to(xs_pad.device)\n",
            "        masks = (~make_pad_mask(ilens, maxlen=xs_pad.size(1))[:, None, :]).to(xs_pad.device)\n",
        ),
        (
            "speech.py",
            "        ys_true = torch.cat([ys_pad[i, :n] for i, n in enumerate(ys_lens)])\n"
            "        loss = self.loss_fn(ys_hat, ys_true, hlens, ys_lens)",
            "        loss = self.loss_fn(ys_hat, ys_pad, hlens, ys_lens)",
        ),
    ],
    "top_p_sampling": [
        (
            "nlp.py",
            "        indices_to_remove = sorted_indices[sorted_indices_to_remove]\n",
            "        indices_to_remove = sorted_indices_to_remove.scatter(-1, sorted_indices, sorted_indices_to_remove)\n",
        ),
    ],
    "packed_docs": [
        (
            "nlp.py",
            "        cu_seqlens, max_seqlen = prepare_varlen_from_position_ids(position_ids)\n"
            "        cos, sin = self.rotary_emb(v, seq_len=max_seqlen)\n"
            "        q, k = apply_rotary_pos_emb(q, k, cos, sin, position_ids)\n"
            "\n"
            "        attn = varlen_sdpa(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu_seqlens)\n"
            "        return self.o_proj(attn.reshape(bsz, q_len, -1))\n",
            "        cos, sin = self.rotary_emb(v, seq_len=q_len)\n"
            "        q, k = apply_rotary_pos_emb(q, k, cos, sin, position_ids)\n"
            "\n"
            "        doc_ids = (position_ids == 0).cumsum(-1)\n"
            "        same_doc = doc_ids[:, :, None] == doc_ids[:, None, :]\n"
            "        causal = torch.ones(q_len, q_len, dtype=torch.bool, device=q.device).tril()\n"
            "        attn_mask = (same_doc & causal)[:, None]\n"
            "        attn = F.scaled_dot_product_attention(\n"
            "            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=attn_mask\n"
            "        )\n"
            "        return self.o_proj(attn.transpose(1, 2).reshape(bsz, q_len, -1))\n",
        ),
    ],
    "pabee_exit": [
        (
            "nlp.py",
            "        patient_counter = 0\n"
            "        patient_result = None\n"
            "        calculated_layer_num = 0\n"
            "        for i in range(len(self.layer)):\n"
            "            calculated_layer_num += 1\n"
            "            encoder_outputs = self.layer[i](encoder_outputs, extended_attention_mask)\n"
            "            pooled_output = self.pooler(encoder_outputs[:, 0])\n"
            "            logits = self.classifiers[i](pooled_output)\n"
            "            labels = logits.detach().argmax(dim=1)\n"
            "            if patient_result is not None:\n"
            "                patient_labels = patient_result.detach().argmax(dim=1)\n"
            "            if (patient_result is not None) and torch.all(labels.eq(patient_labels)):\n"
            "                patient_counter += 1\n"
            "            else:\n"
            "                patient_counter = 0\n"
            "\n"
            "            patient_result = logits\n"
            "            if patient_counter == self.patience:\n"
            "                break\n",
            "        patient_counter = torch.zeros((), dtype=torch.long)\n"
            "        exited = torch.zeros((), dtype=torch.bool)\n"
            "        patient_result = None\n"
            "        calculated_layer_num = torch.zeros((), dtype=torch.long)\n"
            "        for i in range(len(self.layer)):\n"
            "            calculated_layer_num = calculated_layer_num + (~exited).long()\n"
            "            encoder_outputs = self.layer[i](encoder_outputs, extended_attention_mask)\n"
            "            pooled_output = self.pooler(encoder_outputs[:, 0])\n"
            "            logits = self.classifiers[i](pooled_output)\n"
            "            if patient_result is None:\n"
            "                patient_result = logits\n"
            "                continue\n"
            "            labels = logits.detach().argmax(dim=1)\n"
            "            patient_labels = patient_result.detach().argmax(dim=1)\n"
            "            same = torch.all(labels.eq(patient_labels))\n"
            "            patient_counter = torch.where(exited, patient_counter, torch.where(same, patient_counter + 1, 0))\n"
            "            patient_result = torch.where(exited, patient_result, logits)\n"
            "            exited = exited | (patient_counter == self.patience)\n",
        ),
    ],
    "mod_routing": [
        (
            "nlp.py",
            "        if not selected_mask.any():\n"
            "            return x\n"
            "        tokens = x[selected_mask]\n"
            "        weights = router_logits[selected_mask]\n"
            "        out = x.clone()\n"
            "        out[selected_mask] = tokens + torch.sigmoid(weights).unsqueeze(-1) * self.block(tokens)\n"
            "        return out\n",
            "        processed = x + torch.sigmoid(router_logits).unsqueeze(-1) * self.block(x)\n"
            "        return torch.where(selected_mask.unsqueeze(-1), processed, x)\n",
        ),
    ],
    "atss_assign": [
        (
            "vision.py",
            "        overlaps_inf = torch.full_like(overlaps, -INF).t().contiguous().view(-1)\n"
            "        index = candidate_idxs.view(-1)[is_pos.view(-1)]\n"
            "        overlaps_inf[index] = overlaps.t().contiguous().view(-1)[index]\n",
            "        pos_mask = torch.zeros(num_gt * num_bboxes, dtype=torch.bool, device=bboxes.device)\n"
            "        pos_mask = pos_mask.scatter(0, candidate_idxs.view(-1), is_pos.view(-1))\n"
            "        overlaps_inf = torch.where(pos_mask, overlaps.t().contiguous().view(-1), -INF)\n",
        ),
        (
            "vision.py",
            "        assigned_gt_inds[max_overlaps != -INF] = argmax_overlaps[max_overlaps != -INF] + 1\n",
            "        assigned_gt_inds = torch.where(max_overlaps != -INF, argmax_overlaps + 1, assigned_gt_inds)\n",
        ),
        (
            "vision.py",
            "            assigned_labels = assigned_gt_inds.new_full((num_bboxes,), -1)\n"
            "            pos_inds = torch.nonzero(assigned_gt_inds > 0, as_tuple=False).squeeze()\n"
            "            if pos_inds.numel() > 0:\n"
            "                assigned_labels[pos_inds] = gt_labels[assigned_gt_inds[pos_inds] - 1]\n",
            "            assigned_labels = torch.where(\n"
            "                assigned_gt_inds > 0, gt_labels[(assigned_gt_inds - 1).clamp(min=0)], -1\n"
            "            )\n",
        ),
    ],
    "simota_assign": [
        (
            "vision.py",
            "    dynamic_ks = dynamic_ks.tolist()\n"
            "    for gt_idx in range(num_gt):\n"
            "        _, pos_idx = torch.topk(cost[gt_idx], k=dynamic_ks[gt_idx], largest=False)\n"
            "        matching_matrix[gt_idx][pos_idx] = 1\n"
            "\n"
            "    del topk_ious, dynamic_ks, pos_idx\n",
            "    ranks = cost.argsort(dim=1).argsort(dim=1)\n"
            "    matching_matrix = (ranks < dynamic_ks[:, None]).to(torch.uint8)\n"
            "\n"
            "    del topk_ious, dynamic_ks\n",
        ),
        (
            "vision.py",
            "    if (anchor_matching_gt > 1).sum() > 0:\n"
            "        _, cost_argmin = torch.min(cost[:, anchor_matching_gt > 1], dim=0)\n"
            "        matching_matrix[:, anchor_matching_gt > 1] *= 0\n"
            "        matching_matrix[cost_argmin, anchor_matching_gt > 1] = 1\n",
            "    resolved = F.one_hot(cost.argmin(dim=0), num_gt).t().to(torch.uint8)\n"
            "    matching_matrix = torch.where(anchor_matching_gt[None, :] > 1, resolved, matching_matrix)\n",
        ),
    ],
    "oks_keypoints": [
        (
            "vision.py",
            "    ious = dts.new_zeros((dts.shape[0], gts.shape[0]))\n"
            "    for j, gt in enumerate(gts):\n"
            "        xg, yg, vg = gt[:, 0], gt[:, 1], gt[:, 2]\n"
            "        k1 = torch.count_nonzero(vg > 0)\n"
            "        bb = gt_boxes[j]\n"
            "        x0 = bb[0] - bb[2]\n"
            "        x1 = bb[0] + bb[2] * 2\n"
            "        y0 = bb[1] - bb[3]\n"
            "        y1 = bb[1] + bb[3] * 2\n"
            "        xd, yd = dts[:, :, 0], dts[:, :, 1]\n"
            "        if k1 > 0:\n"
            "            # measure the per-keypoint distance if keypoints visible\n"
            "            dx = xd - xg\n"
            "            dy = yd - yg\n"
            "        else:\n"
            "            # measure minimum distance to keypoints in (x0,y0) & (x1,y1)\n"
            "            z = torch.zeros_like(xd)\n"
            "            dx = torch.maximum(z, x0 - xd) + torch.maximum(z, xd - x1)\n"
            "            dy = torch.maximum(z, y0 - yd) + torch.maximum(z, yd - y1)\n"
            "        e = (dx**2 + dy**2) / vars / (gt_areas[j] + np.spacing(1)) / 2\n"
            "        if k1 > 0:\n"
            "            e = e[:, vg > 0]\n"
            "        ious[:, j] = torch.sum(torch.exp(-e), dim=1) / e.shape[1]\n"
            "    return ious\n",
            "    # every (detection, gt, keypoint) at once: (D, 1, K) detections against (1, G, K) ground truths\n"
            "    xg, yg, vg = gts[None, :, :, 0], gts[None, :, :, 1], gts[None, :, :, 2]\n"
            "    visible = vg > 0\n"
            "    k1 = visible.sum(-1, keepdim=True)\n"
            "    x0 = (gt_boxes[:, 0] - gt_boxes[:, 2])[None, :, None]\n"
            "    x1 = (gt_boxes[:, 0] + gt_boxes[:, 2] * 2)[None, :, None]\n"
            "    y0 = (gt_boxes[:, 1] - gt_boxes[:, 3])[None, :, None]\n"
            "    y1 = (gt_boxes[:, 1] + gt_boxes[:, 3] * 2)[None, :, None]\n"
            "    xd, yd = dts[:, None, :, 0], dts[:, None, :, 1]\n"
            "    z = torch.zeros_like(xd - xg)\n"
            "    dx = torch.where(k1 > 0, xd - xg, torch.maximum(z, x0 - xd) + torch.maximum(z, xd - x1))\n"
            "    dy = torch.where(k1 > 0, yd - yg, torch.maximum(z, y0 - yd) + torch.maximum(z, yd - y1))\n"
            "    e = (dx**2 + dy**2) / vars / (gt_areas[None, :, None] + 2.220446049250313e-16) / 2  # np.spacing(1)\n"
            "    # average over the visible keypoints, or over all of them for a gt without any\n"
            "    w = torch.where(k1 > 0, visible.to(e.dtype), torch.ones_like(vg))\n"
            "    return (torch.exp(-e) * w).sum(-1) / w.sum(-1)\n",
        ),
    ],
    "rlhf_rewards": [
        MASKED_VAR,
        (
            "rl.py",
            "            last_non_masked_index = mask.nonzero()[-1]\n",
            "            last_non_masked_index = (mask * torch.arange(mask.shape[0], device=mask.device)).argmax().unsqueeze(0)\n",
        ),
        (
            "rl.py",
            "        self.kl_ctl.update(mean_kl.item(), query_response.shape[0])\n",
            "        self.kl_ctl.update(mean_kl.detach(), query_response.shape[0])\n",
        ),
        (
            "rl.py",
            "        proportional_error = np.clip(current / target - 1, -0.2, 0.2)\n",
            "        proportional_error = torch.clamp(current / target - 1, -0.2, 0.2)\n",
        ),
    ],
    "c51_projection": [
        (
            "rl.py",
            "            l[(u > 0) * (l == u)] -= 1\n            u[(l < (self.atoms - 1)) * (l == u)] += 1\n",
            "            l = torch.where((u > 0) * (l == u), l - 1, l)\n"
            "            u = torch.where((l < (self.atoms - 1)) * (l == u), u + 1, u)\n",
        ),
    ],
    "pendulum_rollout": [
        (
            "rl.py",
            "            if done.any():\n"
            "                th, thdot, steps = self.env.reset_done(th, thdot, steps, done)\n",
            "            th, thdot, steps = self.env.reset_done(th, thdot, steps, done)\n",
        ),
    ],
    "khop_sage": [
        (
            "graph.py",
            "        subset, sub_edge_index, mapping, _ = k_hop_subgraph(\n"
            "            seeds, len(self.convs), edge_index, relabel_nodes=True\n"
            "        )\n"
            "        h = x[subset]\n"
            "        for i, conv in enumerate(self.convs):\n"
            "            h = conv(h, sub_edge_index)\n",
            "        h = x\n"
            "        for i, conv in enumerate(self.convs):\n"
            "            h = conv(h, edge_index)\n",
        ),
        (
            "graph.py",
            "        return F.log_softmax(h[mapping], dim=-1)\n",
            "        return F.log_softmax(h[seeds], dim=-1)\n",
        ),
    ],
    "lj_cutoff": [
        (
            "science.py",
            "        pairs, dist = pairs[:, within], dist[within]\n",
            "        dist = torch.where(within, dist, torch.full_like(dist, self.cutoff))\n",
        ),
        (
            "science.py",
            "        e_pair = 4 * eps_ij * (sr6**2 - sr6) * self.switching(dist)\n"
            "\n"
            '        energy = scatter(e_pair, batch[pairs[0]], dim=0, reduce="sum")\n',
            "        e_pair = torch.where(within, 4 * eps_ij * (sr6**2 - sr6) * self.switching(dist), 0.0)\n"
            "\n"
            '        energy = scatter(e_pair, batch[pairs[0]], dim=0, dim_size=box.size(0), reduce="sum")\n',
        ),
    ],
    "gp_jitter": [
        (
            "science.py",
            "    if std < 1e-8:\n        std = torch.ones_like(std)\n",
            "    std = torch.where(std < 1e-8, torch.ones_like(std), std)\n",
        ),
    ],
    "pid_autotune": [
        (
            "science.py",
            "        if abs(self.integral.item()) > self.integral_limit:\n"
            "            self.integral = self.integral.clamp(-self.integral_limit, self.integral_limit)\n",
            "        self.integral = self.integral.clamp(-self.integral_limit, self.integral_limit)\n",
        ),
    ],
    "two_tower": [
        (
            "recsys.py",
            "        candidates, target = torch.unique(item_ids, return_inverse=True)\n"
            "        c = F.normalize(self.candidate_tower(candidates, self.item_categories), dim=-1)\n"
            "        logits = q @ c.t() / self.temperature\n"
            "        logits = logits - self.item_log_q[candidates]  # sampling-bias correction (Yi et al., 2019)\n",
            "        target = (item_ids[:, None] == item_ids[None, :]).int().argmax(dim=0)  # first column with the item\n"
            "        first_occurrence = target == torch.arange(item_ids.size(0), device=item_ids.device)\n"
            "        c = F.normalize(self.candidate_tower(item_ids, self.item_categories), dim=-1)\n"
            "        logits = q @ c.t() / self.temperature\n"
            "        logits = logits - self.item_log_q[item_ids]  # sampling-bias correction (Yi et al., 2019)\n"
            '        logits = logits.masked_fill(~first_occurrence[None, :], float("-inf"))\n',
        ),
    ],
    "din_history": [
        MAKE_PAD_MASK,
        (
            "recsys.py",
            "        max_len = int(hist_len.max())\n        hist_items = hist_items[:, :max_len]\n",
            "",
        ),
        (
            "recsys.py",
            "        keys_masks = make_pad_mask(keys_length)",
            "        keys_masks = make_pad_mask(keys_length, maxlen=keys.size(1))",
        ),
    ],
    "simclr_ntxent": [
        (
            "recsys.py",
            "        positive_samples = torch.cat((sim_i_j, sim_j_i), dim=0).reshape(N, 1)\n"
            "        negative_samples = sim[self.mask].reshape(N, -1)\n"
            "\n"
            "        labels = torch.zeros(N).to(positive_samples.device).long()\n"
            "        logits = torch.cat((positive_samples, negative_samples), dim=1)\n",
            '        logits = sim.masked_fill(torch.eye(N, dtype=torch.bool, device=sim.device), float("-inf"))\n'
            "        labels = (torch.arange(N, device=sim.device) + N // 2) % N  # each view's partner\n",
        ),
    ],
    "dwa_multitask": [
        (
            "training.py",
            "        w = torch.tensor(self.history[-1]) / torch.tensor(self.history[-2])\n",
            "        w = self.history[-1] / self.history[-2]\n",
        ),
        (
            "training.py",
            "        self.history.append([loss.item() for loss in losses])\n",
            "        self.history.append(losses.detach())\n",
        ),
    ],
    "t5_fp16": [
        (
            "training.py",
            "        hidden_states, position_bias = self.layer[0](\n"
            "            hidden_states, attention_mask=attention_mask, position_bias=position_bias\n"
            "        )\n"
            "\n"
            "        # clamp inf values to enable fp16 training\n"
            "        if hidden_states.dtype == torch.float16 and torch.isinf(hidden_states).any():\n"
            "            clamp_value = torch.finfo(hidden_states.dtype).max - 1000\n",
            "        hidden_states, position_bias = self.layer[0](\n"
            "            hidden_states, attention_mask=attention_mask, position_bias=position_bias\n"
            "        )\n"
            "\n"
            "        # clamp inf values to enable fp16 training\n"
            "        if hidden_states.dtype == torch.float16:\n"
            "            clamp_value = torch.where(\n"
            "                torch.isinf(hidden_states).any(),\n"
            "                torch.finfo(hidden_states.dtype).max - 1000,\n"
            "                torch.finfo(hidden_states.dtype).max,\n"
            "            )\n",
        ),
        (
            "training.py",
            "        hidden_states = self.layer[-1](hidden_states)\n"
            "\n"
            "        # clamp inf values to enable fp16 training\n"
            "        if hidden_states.dtype == torch.float16 and torch.isinf(hidden_states).any():\n"
            "            clamp_value = torch.finfo(hidden_states.dtype).max - 1000\n",
            "        hidden_states = self.layer[-1](hidden_states)\n"
            "\n"
            "        # clamp inf values to enable fp16 training\n"
            "        if hidden_states.dtype == torch.float16:\n"
            "            clamp_value = torch.where(\n"
            "                torch.isinf(hidden_states).any(),\n"
            "                torch.finfo(hidden_states.dtype).max - 1000,\n"
            "                torch.finfo(hidden_states.dtype).max,\n"
            "            )\n",
        ),
    ],
    "glow_actnorm": [
        (
            "generative.py",
            '        self.register_buffer("initialized", torch.tensor(0, dtype=torch.uint8))\n',
            '        self.register_buffer("initialized", torch.tensor(0, dtype=torch.uint8))\n'
            "        self._initialized = False\n",
        ),
        (
            "generative.py",
            "        if self.initialized.item() == 0:\n"
            "            self.initialize(input)\n"
            "            self.initialized.fill_(1)\n",
            "        if not self._initialized:\n"
            "            self.initialize(input)\n"
            "            self.initialized.fill_(1)\n"
            "            self._initialized = True\n",
        ),
    ],
    "nerf_render": [
        (
            "generative.py",
            "        if (torch.isnan(ret[k]).any() or torch.isinf(ret[k]).any()) and DEBUG:\n",
            "        if DEBUG and (torch.isnan(ret[k]).any() or torch.isinf(ret[k]).any()):\n",
        ),
    ],
}

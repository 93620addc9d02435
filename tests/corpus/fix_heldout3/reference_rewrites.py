"""Hand-written rewrites of every fixable site, to show each one can keep outputs and gradients.

``REWRITES[name]`` is a list of ``(file, old, new)`` replacements applied to a copy of the package
with its ``# BREAK`` comments stripped; ``check.py`` compiles the patched program and compares it
with the original's eager run.  Must-not sites are left as they are.
"""

from __future__ import annotations

REWRITES: dict[str, list[tuple[str, str, str]]] = {
    "bert_mlm": [
        ("text.py",
         "        if not masked.any():\n            masked[:, 1] = True\n",
         "        masked[:, 1] = masked[:, 1] | ~masked.any()\n"),
        ("text.py",
         "        inputs[randomized] = random_words[randomized]\n",
         "        inputs = torch.where(randomized, random_words, inputs)\n"),
        ("text.py",
         "        loss = F.cross_entropy(logits[masked], labels[masked])\n",
         "        loss = F.cross_entropy(logits.reshape(-1, self.vocab), labels.masked_fill(~masked, -100).reshape(-1))\n"),
    ],
    "dynamic_truncation": [
        ("text.py",
         "        max_len = int(attention_mask.sum(1).max())\n",
         "        max_len = input_ids.shape[1]\n"),
        ("text.py", '        report("trimmed batch length", max_len)\n', ""),
    ],
    "crf_viterbi": [
        ("text.py", "        loss = nll / mask.sum().item()\n", "        loss = nll / mask.sum()\n"),
    ],
    "rope_ntk_scaling": [
        ("attention.py",
         """        seq_len = int(position_ids.max()) + 1
        if seq_len > self.max_position_embeddings:
            base = self.base * (
                (self.scaling_factor * seq_len / self.max_position_embeddings) - (self.scaling_factor - 1)
            ) ** (self.dim / (self.dim - 2))
            inv_freq = 1.0 / (base ** (torch.arange(0, self.dim, 2, dtype=torch.int64).float() / self.dim))
        else:
            inv_freq = self.inv_freq
        t = torch.arange(seq_len, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[position_ids], emb.sin()[position_ids]
""",
         """        seq_len = position_ids.max() + 1
        scaled = self.base * (
            (self.scaling_factor * seq_len / self.max_position_embeddings) - (self.scaling_factor - 1)
        ) ** (self.dim / (self.dim - 2))
        base = torch.where(seq_len > self.max_position_embeddings, scaled, self.base)
        inv_freq = 1.0 / (base ** (torch.arange(0, self.dim, 2, dtype=torch.int64).float() / self.dim))
        freqs = position_ids[..., None].float() * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()
"""),
    ],
    "sparse_topk_attention": [
        ("attention.py",
         """        keep = torch.sigmoid(self.keep_logit).item()
        top_k = max(1, int(keep * L))
        top = scores.topk(top_k, dim=-1)
        sparse = torch.full_like(scores, float("-inf")).scatter(-1, top.indices, top.values)
""",
         """        keep = torch.sigmoid(self.keep_logit)
        top_k = (keep * L).long().clamp(min=1)
        kth = scores.sort(dim=-1, descending=True).values.gather(-1, (top_k - 1).expand(*scores.shape[:-1], 1))
        sparse = scores.masked_fill(scores < kth, float("-inf"))
"""),
    ],
    "speculative_accept": [
        ("decoding.py", '        print(f"speculative step: accepted {n_accept}/{k}")\n', ""),
    ],
    "yolo_targets": [
        ("detection.py",
         """    for i, anchor_ious in enumerate(ious.t()):
        noobj_mask[b[i], anchor_ious > ignore_thres, gj[i], gi[i]] = False
""",
         """    hits = torch.zeros(B, A, G, G)
    a_idx = torch.arange(A)[None, :].expand(ious.shape[1], A)
    hits.index_put_((b[:, None].expand_as(a_idx), a_idx, gj[:, None].expand_as(a_idx), gi[:, None].expand_as(a_idx)),
                    (ious.t() > ignore_thres).float(), accumulate=True)
    noobj_mask = noobj_mask & (hits == 0)
"""),
        ("detection.py",
         "        num_pos = obj_mask.sum().item()\n",
         "        num_pos = obj_mask.sum().clamp(min=1)\n"),
        ("detection.py",
         "        loss_box = ((pbox - tbox) ** 2).sum(-1)[obj_mask].sum() / max(num_pos, 1)\n",
         "        loss_box = (((pbox - tbox) ** 2).sum(-1) * obj_mask).sum() / num_pos\n"),
        ("detection.py",
         "        loss_cls = (cls_loss * obj_mask.reshape(-1)).sum() / max(num_pos, 1)\n",
         "        loss_cls = (cls_loss * obj_mask.reshape(-1)).sum() / num_pos\n"),
    ],
    "detr_set_loss": [
        ("detection.py",
         "        num_boxes = max(num_tgt.sum().item(), 1)\n",
         "        num_boxes = num_tgt.sum().clamp(min=1)\n"),
        ("detection.py",
         """        matches = greedy_match(logits.detach(), boxes.detach(), tgt_labels, tgt_boxes, num_tgt)
        loss_ce, loss_bbox = logits.new_zeros(()), logits.new_zeros(())
        for b, src in enumerate(matches):
            n = src.shape[0]
            matched = torch.zeros(logits.shape[1], dtype=torch.bool)
            matched[src] = True
            loss_ce = loss_ce + F.cross_entropy(logits[b, src], tgt_labels[b, :n], reduction="sum")
            no_object = torch.full((logits.shape[1],), self.num_classes)
            empty = F.cross_entropy(logits[b], no_object, reduction="none")
            loss_ce = loss_ce + self.eos_coef * (empty * ~matched).sum()
            loss_bbox = loss_bbox + F.l1_loss(boxes[b, src], tgt_boxes[b, :n], reduction="sum")
""",
         """        B, Q, M = logits.shape[0], logits.shape[1], tgt_labels.shape[1]
        valid = torch.arange(M)[None, :] < num_tgt[:, None]
        prob = logits.detach().softmax(-1)
        cost = torch.cdist(boxes.detach(), tgt_boxes, p=1) - prob.gather(2, tgt_labels[:, None, :].expand(B, Q, M))
        src = cost.argmin(1)
        matched = torch.zeros(B, Q + 1, dtype=torch.bool).scatter(1, torch.where(valid, src, Q), True)[:, :Q]
        matched_logits = logits.gather(1, src[:, :, None].expand(B, M, logits.shape[2]))
        ce = F.cross_entropy(matched_logits.reshape(B * M, -1), tgt_labels.reshape(-1), reduction="none")
        loss_ce = (ce * valid.reshape(-1)).sum()
        no_object = torch.full((B * Q,), self.num_classes)
        empty = F.cross_entropy(logits.reshape(B * Q, -1), no_object, reduction="none").view(B, Q)
        loss_ce = loss_ce + self.eos_coef * (empty * ~matched).sum()
        matched_boxes = boxes.gather(1, src[:, :, None].expand(B, M, 4))
        loss_bbox = ((matched_boxes - tgt_boxes).abs().sum(-1) * valid).sum()
"""),
    ],
    "pointnet_fps": [
        ("pointcloud.py",
         "        distance[mask] = dist[mask]\n",
         "        distance = torch.where(mask, dist, distance)\n"),
        ("pointcloud.py",
         "    group_idx[mask] = group_first[mask]\n",
         "    group_idx = torch.where(mask, group_first, group_idx)\n"),
    ],
    "class_balanced_focal": [
        ("training.py",
         """        counts = torch.bincount(targets, minlength=self.num_classes)
        weights = [(1 - self.beta) / (1 - self.beta ** max(n, 1)) for n in counts.tolist()]
        weights = torch.tensor(weights, dtype=logits.dtype)
""",
         """        counts = F.one_hot(targets, self.num_classes).sum(0)
        weights = (1 - self.beta) / (1 - self.beta ** counts.clamp(min=1).to(logits.dtype))
"""),
    ],
    "spectral_norm": [
        ("helpers.py",
         """    for _ in range(max_iters):
        v = F.normalize(W.t() @ u, dim=0)
        u_next = F.normalize(W @ v, dim=0)
        if torch.norm(u_next - u) < tol:
            u = u_next
            break
        u = u_next
""",
         """    done = torch.zeros((), dtype=torch.bool)
    for _ in range(max_iters):
        v_next = F.normalize(W.t() @ u, dim=0)
        u_next = F.normalize(W @ v_next, dim=0)
        converged = torch.norm(u_next - u) < tol
        v = torch.where(done, v, v_next)
        u = torch.where(done, u, u_next)
        done = done | converged
"""),
    ],
    "grad_reversal": [
        ("training.py",
         """        p = float(self.step) / self.total_steps
        lambd = 2.0 / (1.0 + math.exp(-10 * p)) - 1
""",
         """        p = self.step / self.total_steps
        lambd = 2.0 / (1.0 + torch.exp(-10 * p)) - 1
"""),
    ],
    "gumbel_anneal": [
        ("training.py",
         "        tau = max(self.tau_min, self.tau0 * math.exp(-self.anneal_rate * self.step.item()))\n",
         "        tau = torch.clamp(self.tau0 * torch.exp(-self.anneal_rate * self.step), min=self.tau_min)\n"),
    ],
    "mixup": [
        ("training.py", '        report("mixup lambda", lam)\n', ""),
    ],
    "early_exit": [
        ("training.py",
         "        if not torch.isfinite(x).all():\n            x = torch.nan_to_num(x)\n",
         "        x = torch.nan_to_num(x)\n"),
    ],
    "quant_observer": [
        ("compression.py",
         '        self.min_val = float("inf")\n        self.max_val = float("-inf")\n',
         '        self.register_buffer("min_val", torch.tensor(float("inf")))\n'
         '        self.register_buffer("max_val", torch.tensor(float("-inf")))\n'),
        ("compression.py",
         """        self.min_val = min(self.min_val, x.detach().min().item())
        self.max_val = max(self.max_val, x.detach().max().item())
""",
         """        self.min_val.copy_(torch.minimum(self.min_val, x.detach().min()))
        self.max_val.copy_(torch.maximum(self.max_val, x.detach().max()))
"""),
        ("compression.py",
         """        scale = max(self.max_val - self.min_val, 1e-8) / 255.0
        zero_point = min(255, max(0, round(-self.min_val / scale)))
""",
         """        scale = torch.clamp(self.max_val - self.min_val, min=1e-8) / 255.0
        zero_point = torch.clamp(torch.round(-self.min_val / scale), 0, 255)
"""),
    ],
    "magnitude_pruning": [
        ("compression.py",
         "        threshold = w.kthvalue(k).values.item()\n",
         "        threshold = w.kthvalue(k).values\n"),
    ],
    "per_dqn": [
        ("rl.py",
         """            for i in range(dones.shape[0]):
                if dones[i]:
                    next_q[i] = 0.0
""",
         "            next_q = torch.where(dones, 0.0, next_q)\n"),
    ],
    "moco_queue": [
        ("selfsup.py",
         """        ptr = int(self.queue_ptr)
        assert self.K % batch_size == 0
        self.queue[:, ptr : ptr + batch_size] = keys.T
        ptr = (ptr + batch_size) % self.K
        self.queue_ptr[0] = ptr
""",
         """        assert self.K % batch_size == 0
        idx = (self.queue_ptr + torch.arange(batch_size)) % self.K
        self.queue.index_copy_(1, idx, keys.T)
        self.queue_ptr.copy_((self.queue_ptr + batch_size) % self.K)
"""),
    ],
    "tabular_unknown": [
        ("tabular.py",
         """    std = x.std(0)
    if (std < eps).any():
        warnings.warn("constant numeric column", stacklevel=2)
        std = std.clamp(min=eps)
""",
         "    std = x.std(0).clamp(min=eps)\n"),
    ],
    "kg_negative_sampling": [
        ("kg.py",
         "        n_active = int((violations > 0).sum())\n        return violations.sum() / max(n_active, 1)\n",
         "        n_active = (violations > 0).sum()\n        return violations.sum() / n_active.clamp(min=1)\n"),
    ],
    "specaugment": [
        ("speech.py",
         "        mean, std = x.mean().item(), x.std().item()\n",
         "        mean, std = x.mean(), x.std()\n"),
    ],
}

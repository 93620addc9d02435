"""Hand-written reference rewrites for the thirteenth held-out set: per program, exact-text replacements
``(file, old, new)`` applied to a copy of the package whose ``# BREAK`` comments were stripped. Applied
together they remove every fixable break of the program while keeping its outputs and its parameters'
gradients (``check.py`` verifies both against the original run in eager)."""

from __future__ import annotations

# --------------------------------------------------------------------------- rl.py (through helpers.py)

PPO = [
    (
        "helpers.py",
        "    return np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y\n",
        "    return np.where(var_y == 0, np.nan, 1 - np.var(y_true - y_pred) / var_y)\n",
    ),
]

REWRITES: dict[str, list[tuple[str, str, str]]] = {"ppo_sb3_train": PPO}

# --------------------------------------------------------------------------- detection.py

CENTERPOINT = [
    (
        "detection.py",
        """        if num_pos == 0:
            return -neg_loss
        return -(pos_loss + neg_loss) / num_pos
""",
        """        return torch.where(num_pos == 0, -neg_loss, -(pos_loss + neg_loss) / num_pos.clamp(min=1))
""",
    ),
]

REWRITES.update({"centerpoint_head": CENTERPOINT})

# --------------------------------------------------------------------------- segmentation.py

OHEM = [
    (
        "segmentation.py",
        """            seg_weight = seg_logit.new_zeros(size=seg_label.size())
            valid_seg_weight = seg_weight[valid_mask]
            if self.thresh is not None:
                seg_prob = F.softmax(seg_logit, dim=1)

                tmp_seg_label = seg_label.clone().unsqueeze(1)
                tmp_seg_label[tmp_seg_label == self.context.ignore_index] = 0
                seg_prob = seg_prob.gather(1, tmp_seg_label).squeeze(1)
                sort_prob, sort_indices = seg_prob[valid_mask].sort()

                if sort_prob.numel() > 0:
                    min_threshold = sort_prob[min(batch_kept, sort_prob.numel() - 1)]
                else:
                    min_threshold = 0.0
                threshold = max(min_threshold, self.thresh)
                valid_seg_weight[seg_prob[valid_mask] < threshold] = 1.0
            else:
""",
        """            seg_weight = seg_logit.new_zeros(size=seg_label.size())
            if self.thresh is not None:
                seg_prob = F.softmax(seg_logit, dim=1)

                tmp_seg_label = seg_label.clone().unsqueeze(1)
                tmp_seg_label[tmp_seg_label == self.context.ignore_index] = 0
                seg_prob = seg_prob.gather(1, tmp_seg_label).squeeze(1)
                # the valid probabilities in ascending order, the ignored pixels pushed past them
                sort_prob, sort_indices = seg_prob.masked_fill(~valid_mask, float("inf")).flatten().sort()
                num_valid = valid_mask.sum()
                kept = torch.clamp(num_valid - 1, min=0, max=batch_kept)
                min_threshold = torch.where(num_valid > 0, sort_prob.gather(0, kept.reshape(1))[0], 0.0)
                threshold = torch.clamp(min_threshold, min=self.thresh)
                return (valid_mask & (seg_prob < threshold)).to(seg_weight.dtype)
            else:
                valid_seg_weight = seg_weight[valid_mask]
""",
    ),
]

BISENET = [
    (
        "segmentation.py",
        """        n_min = labels[labels != self.lb_ignore].numel() // 16
        loss = self.criteria(logits, labels).view(-1)
        loss_hard = loss[loss > self.thresh]
        if loss_hard.numel() < n_min:
            loss_hard, _ = loss.topk(n_min)
        return torch.mean(loss_hard)
""",
        """        n_min = (labels != self.lb_ignore).sum() // 16
        loss = self.criteria(logits, labels).view(-1)
        # the hard pixels are the largest losses: average the top max(#hard, n_min) of the sorted losses
        n_hard = (loss > self.thresh).sum()
        loss_sorted, _ = loss.sort(descending=True)
        n_kept = torch.maximum(n_hard, n_min)
        kept = torch.arange(loss.numel(), device=loss.device) < n_kept
        return (loss_sorted * kept).sum() / n_kept
""",
    ),
]

LOVASZ = [
    (
        "segmentation.py",
        """def lovasz_softmax_flat(probas, labels, classes="present"):
    \"\"\"Multi-class Lovasz-Softmax loss over flattened pixels; probas [P, C], labels [P].\"\"\"
    if probas.numel() == 0:
        # only void pixels, the gradients should be 0
        return probas * 0.0
    C = probas.size(1)
    losses = []
    class_to_sum = list(range(C)) if classes in ["all", "present"] else classes
    for c in class_to_sum:
        fg = (labels == c).float()  # foreground for class c
        if classes == "present" and fg.sum() == 0:
            continue
""",
        """def lovasz_softmax_flat(probas, labels, valid=None, classes="present"):
    \"\"\"Multi-class Lovasz-Softmax loss over flattened pixels; probas [P, C], labels [P], valid [P].\"\"\"
    if probas.numel() == 0:
        # only void pixels, the gradients should be 0
        return probas * 0.0
    if valid is None:
        valid = torch.ones_like(labels, dtype=torch.bool)
    C = probas.size(1)
    losses = []
    present = []
    class_to_sum = list(range(C)) if classes in ["all", "present"] else classes
    for c in class_to_sum:
        fg = ((labels == c) & valid).float()  # foreground for class c among the valid pixels
        present.append(fg.sum() > 0)
""",
    ),
    (
        "segmentation.py",
        """        errors = (fg - class_pred).abs()
        errors_sorted, perm = torch.sort(errors, 0, descending=True)
        perm = perm.data
        fg_sorted = fg[perm]
        losses.append(torch.dot(errors_sorted, lovasz_grad(fg_sorted)))
    return mean(losses)
""",
        """        # ignored pixels get a negative error: they sort after every valid one and weigh nothing
        errors = torch.where(valid, (fg - class_pred).abs(), -1.0)
        errors_sorted, perm = torch.sort(errors, 0, descending=True)
        perm = perm.data
        fg_sorted = fg[perm]
        losses.append(torch.dot(errors_sorted.clamp(min=0), lovasz_grad(fg_sorted)))
    if classes == "present":
        weight = torch.stack(present).to(probas.dtype)
        return (torch.stack(losses) * weight).sum() / weight.sum().clamp(min=1)
    return mean(losses)
""",
    ),
    (
        "segmentation.py",
        """    valid = labels != ignore
    vprobas = probas[valid.nonzero().squeeze()]
    vlabels = labels[valid]
    return vprobas, vlabels
""",
        """    valid = labels != ignore
    return probas, labels, valid
""",
    ),
]

REWRITES.update({
    "mmseg_ohem": OHEM,
    "bisenet_ohem": BISENET,
    "lovasz_softmax": LOVASZ,
})

# --------------------------------------------------------------------------- generative.py

STYLE_MIXING = (
    "generative.py",
    """    def run_G(self, z, c, sync):
        ws = self.G.mapping(z, c)
        if self.style_mixing_prob > 0:
            with torch.autograd.profiler.record_function("style_mixing"):
                cutoff = torch.empty([], dtype=torch.int64, device=ws.device).random_(1, ws.shape[1])
                cutoff = torch.where(torch.rand([], device=ws.device) < self.style_mixing_prob, cutoff, torch.full_like(cutoff, ws.shape[1]))
                ws[:, cutoff:] = self.G.mapping(torch.randn_like(z), c, update_emas=False)[:, cutoff:]
        img = self.G.synthesis(ws)
        return img, ws
""",
    """    def run_G_ws(self, z, c, sync):
        ws = self.G.mapping(z, c)
        if self.style_mixing_prob > 0:
            with torch.autograd.profiler.record_function("style_mixing"):
                cutoff = torch.randint(1, ws.shape[1], [], device=ws.device)
                cutoff = torch.where(torch.rand([], device=ws.device) < self.style_mixing_prob, cutoff, torch.full_like(cutoff, ws.shape[1]))
                mixed = self.G.mapping(torch.randn_like(z), c, update_emas=False)
                ws = torch.where(torch.arange(ws.shape[1], device=ws.device)[None, :, None] >= cutoff, mixed, ws)
        return ws

    def run_G(self, z, c, sync):
        ws = self.run_G_ws(z, c, sync)
        img = self.G.synthesis(ws)
        return img, ws
""",
)

STYLEGAN2_GREG = [
    STYLE_MIXING,
    (
        "generative.py",
        """                gen_img, gen_ws = self.run_G(gen_z[:batch_size], gen_c[:batch_size], sync=sync)
                pl_noise = torch.randn_like(gen_img) / np.sqrt(gen_img.shape[2] * gen_img.shape[3])
                with torch.autograd.profiler.record_function("pl_grads"), no_weight_gradients():
                    pl_grads = torch.autograd.grad(outputs=[(gen_img * pl_noise).sum()], inputs=[gen_ws], create_graph=True, only_inputs=True)[0]
""",
        """                gen_ws = self.run_G_ws(gen_z[:batch_size], gen_c[:batch_size], sync=sync)
                # the synthesis runs under vjp: its pullback is differentiable, as autograd.grad's with create_graph
                gen_img, synthesis_vjp = torch.func.vjp(self.G.synthesis, gen_ws)
                pl_noise = torch.randn_like(gen_img) / np.sqrt(gen_img.shape[2] * gen_img.shape[3])
                with torch.autograd.profiler.record_function("pl_grads"), no_weight_gradients():
                    pl_grads = synthesis_vjp(pl_noise)[0]
""",
    ),
]

STYLEGAN2_DREG = [
    (
        "generative.py",
        """                real_img_tmp = real_img.detach().requires_grad_(do_Dr1)
                real_logits = self.run_D(real_img_tmp, real_c, sync=sync)
""",
        """                real_img_tmp = real_img.detach()
                if do_Dr1:
                    # D runs under vjp from the reals: its pullback gives the R1 gradients, differentiably
                    real_logits, d_vjp = torch.func.vjp(lambda img: self.run_D(img, real_c, sync=sync), real_img_tmp)
                else:
                    real_logits = self.run_D(real_img_tmp, real_c, sync=sync)
""",
    ),
    (
        "generative.py",
        "                        r1_grads = torch.autograd.grad(outputs=[real_logits.sum()], inputs=[real_img_tmp], create_graph=True, only_inputs=True)[0]\n",
        "                        r1_grads = d_vjp(torch.ones_like(real_logits))[0]\n",
    ),
]

STYLEGAN2_ADA = [
    (
        "helpers.py",
        """            if float(delta[0]) != 0:
                self._moments[name] = delta
""",
        """            previous = self._moments.get(name, torch.zeros_like(delta))
            self._moments[name] = torch.where(delta[0] != 0, delta, previous)
""",
    ),
    (
        "generative.py",
        """    adjust = np.sign(ada_stats["Loss/signs/real"] - ada_target) * (batch_size * ada_interval) / (ada_kimg * 1000)
""",
        """    moments = ada_stats._get_delta("Loss/signs/real")
    signs_mean = moments[1] / moments[0]  # nan when nothing was reported, as Collector.mean gives
    adjust = torch.sign(signs_mean - ada_target) * (batch_size * ada_interval) / (ada_kimg * 1000)
""",
    ),
]

CONSISTENCY = [
    (
        "generative.py",
        """            scales = np.ceil(np.sqrt((step / total_steps) * ((end_scales + 1) ** 2 - start_scales**2) + start_scales**2) - 1).astype(np.int32)
            scales = np.maximum(scales, 1)
            c = -np.log(start_ema) * start_scales
            target_ema = np.exp(-c / scales)
""",
        """            scales = math.ceil(math.sqrt((step / total_steps) * ((end_scales + 1) ** 2 - start_scales**2) + start_scales**2) - 1)
            scales = max(scales, 1)
            c = -math.log(start_ema) * start_scales
            target_ema = math.exp(-c / scales)
""",
    ),
]

REWRITES.update({
    "stylegan2_greg": STYLEGAN2_GREG,
    "stylegan2_dreg": STYLEGAN2_DREG,
    "stylegan2_ada": STYLEGAN2_ADA,
    "consistency_training": CONSISTENCY,
})

# --------------------------------------------------------------------------- language.py

DEEPSPEED = [
    (
        "language.py",
        "    capacity = _capacity(gates, torch.tensor(capacity_factor), torch.tensor(min_capacity))\n",
        """    # the token and expert counts are static: the capacity is known before the graph runs
    capacity = torch.tensor(max(math.ceil((gates.shape[0] / gates.shape[1]) * capacity_factor), min_capacity))
""",
    ),
]

RWKV = [
    (
        "language.py",
        "        cutoff = float(sorted_probs[np.argmax(cumulative_probs > top_p)])\n",
        "        cutoff = np.take_along_axis(sorted_probs, np.argmax(cumulative_probs > top_p, keepdims=True), axis=0)\n",
    ),
]

LLM_INT8 = [
    (
        "language.py",
        """    outlier_cols = None
    outlier_restore = None
    if threshold > 0.0:
        outliers = A.abs() >= threshold
        if outliers.any():
            # Determine which columns contain outliers, and zero out the
            # outliers ahead of quantization. We need to keep a backup of these
            # outliers to restore them after quantization.
            outlier_cols = torch.argwhere(outliers.any(dim=0)).view(-1)
            outlier_restore = A[outliers].clone()
            A[outliers] = 0
        else:
            # Needed for torch.compile support.
            outlier_cols = torch.empty(0, device=A.device, dtype=torch.int64)
    # Get absmax for each row.
    row_stats = torch.max(A.abs(), dim=1).values.float()
    # Quantize row-wise to int8.
    out_row = torch.round(A * (127.0 / row_stats.unsqueeze(-1))).to(torch.int8)
    # Zero out values from outlier columns across all rows.
    if rows > 1 and outlier_cols is not None:
        out_row[:, outlier_cols] = 0
    # Restore outliers.
    if outlier_restore is not None:
        A[outliers] = outlier_restore
    return out_row, row_stats, outlier_cols
""",
        """    outlier_cols = None
    if threshold > 0.0:
        outliers = A.abs() >= threshold
        # a boolean mask of the columns holding outliers; the outliers are zeroed in a copy of A
        outlier_cols = outliers.any(dim=0)
        A = A.masked_fill(outliers, 0)
    # Get absmax for each row.
    row_stats = torch.max(A.abs(), dim=1).values.float()
    # Quantize row-wise to int8.
    out_row = torch.round(A * (127.0 / row_stats.unsqueeze(-1))).to(torch.int8)
    # Zero out values from outlier columns across all rows.
    if rows > 1 and outlier_cols is not None:
        out_row = out_row.masked_fill(outlier_cols, 0)
    return out_row, row_stats, outlier_cols
""",
    ),
    (
        "language.py",
        """    if outlier_cols is not None and outlier_cols.numel():
        # Extract the inputs with outliers in original precision
        subA = A[:, outlier_cols].contiguous()
        # Dequantize the corresponding weight columns
        subB = int8_vectorwise_dequant(CB[:, outlier_cols].contiguous(), SCB).to(A.dtype).t()
""",
        """    if outlier_cols is not None:
        # the inputs of the outlier columns in original precision, the other columns zeroed
        subA = A * outlier_cols.to(A.dtype)
        # the dequantized weights: only the outlier columns meet nonzero inputs
        subB = int8_vectorwise_dequant(CB, SCB).to(A.dtype).t()
""",
    ),
]

STREAMING = [
    (
        "language.py",
        """        return [
            [
                torch.cat([self.k_slice(k, 0, self.start_size), self.k_slice(k, seq_len - self.recent_size + num_coming, seq_len)], dim=self.k_seq_dim),
                torch.cat([self.v_slice(v, 0, self.start_size), self.v_slice(v, seq_len - self.recent_size + num_coming, seq_len)], dim=self.v_seq_dim),
            ]
            for k, v in past_key_values
        ]
""",
        """        evicted = []
        for k, v in past_key_values:
            evicted.append([
                torch.cat([self.k_slice(k, 0, self.start_size), self.k_slice(k, seq_len - self.recent_size + num_coming, seq_len)], dim=self.k_seq_dim),
                torch.cat([self.v_slice(v, 0, self.start_size), self.v_slice(v, seq_len - self.recent_size + num_coming, seq_len)], dim=self.v_seq_dim),
            ])
        return evicted
""",
    ),
]

REWRITES.update({
    "deepspeed_moe": DEEPSPEED,
    "rwkv_generate": RWKV,
    "llm_int8_lora": LLM_INT8,
    "streaming_llm": STREAMING,
})

# --------------------------------------------------------------------------- metric.py

PROTONET = [
    (
        "metric.py",
        """    def supp_idxs(c):
        # FIXME when torch will support where as np
        return target_cpu.eq(c).nonzero()[:n_support].squeeze(1)
""",
        """    def supp_mask(c):
        # the first n_support members of class c
        member = target_cpu.eq(c)
        return member & (member.cumsum(0) <= n_support)
""",
    ),
    (
        "metric.py",
        """    support_idxs = list(map(supp_idxs, classes))

    prototypes = torch.stack([input_cpu[idx_list].mean(0) for idx_list in support_idxs])
    # FIXME when torch will support where as np
    query_idxs = torch.stack(list(map(lambda c: target_cpu.eq(c).nonzero()[n_support:], classes))).view(-1)
""",
        """    support_masks = list(map(supp_mask, classes))

    prototypes = torch.stack([(input_cpu * m.unsqueeze(1)).sum(0) / m.sum() for m in support_masks])
    # the indices of each class in order, classes ascending as torch.unique returns them (equal counts per class)
    query_idxs = torch.argsort(target_cpu, stable=True).view(n_classes, -1)[:, n_support:].reshape(-1)
""",
    ),
]

REWRITES.update({"protonet_loss": PROTONET})

# --------------------------------------------------------------------------- audio.py

EEND = [
    (
        "audio.py",
        "    return min_loss, label_perms[min_index]\n",
        "    return min_loss, torch.index_select(torch.stack(label_perms), 0, min_index.reshape(1))[0]\n",
    ),
]

REWRITES.update({"eend_pit": EEND})

# --------------------------------------------------------------------------- recsys.py

BERT4REC = [
    (
        "recsys.py",
        "        idcg = torch.Tensor([weights[: min(int(n), k)].sum() for n in answer_count]).to(dcg.device)\n",
        """        # the ideal DCG of a row is the sum of its first min(n, k) weights (0 for a row without answers)
        ideal = torch.cumsum(weights, 0)[(torch.clamp(answer_count, max=k) - 1).clamp(min=0)]
        idcg = torch.where(answer_count > 0, ideal, torch.zeros_like(ideal)).to(dcg.device)
""",
    ),
]

REWRITES.update({"bert4rec": BERT4REC})

# --------------------------------------------------------------------------- scene.py

NGP = [
    (
        "scene.py",
        "        thre = torch.clamp(self.occs[self.occs >= 0].mean(), max=occ_thre)\n",
        """        known = (self.occs >= 0).to(self.occs.dtype)
        thre = torch.clamp((self.occs * known).sum() / known.sum(), max=occ_thre)
""",
    ),
]

REWRITES.update({"ngp_occupancy": NGP})

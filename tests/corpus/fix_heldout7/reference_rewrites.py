"""Hand-written reference rewrites for the seventh held-out set: program -> [(file, old, new)].

Each rewrite applies to a copy of the package with the ``# BREAK`` comments removed; together a program's
rewrites must remove every fixable break it hits while keeping its outputs and its parameters' gradients.
Helpers shared between programs (helpers.py) are rewritten for every program that reaches them.
"""

from __future__ import annotations

NAN_GUARD = (
    "helpers.py",
    "    if torch.isnan(x).any():\n"
    "        x = torch.where(torch.isnan(x), torch.full_like(x, fill), x)\n"
    "    return x\n",
    "    return torch.where(torch.isnan(x), torch.full_like(x, fill), x)\n",
)

REWRITES: dict[str, list[tuple[str, str, str]]] = {
    "fpn_roi_levels": [
        (
            "vision.py",
            "        for lvl, feat in enumerate(feats):\n"
            "            idx_in_level = torch.where(levels == lvl)[0]\n"
            "            pooled[idx_in_level] = self.roi_pool(feat, boxes[idx_in_level])\n",
            "        for lvl, feat in enumerate(feats):\n"
            "            pooled = torch.where((levels == lvl)[:, None, None], self.roi_pool(feat, boxes), pooled)\n",
        ),
    ],
    "centernet_decode": [
        (
            "vision.py",
            "        if wh.min() < 0:\n            wh = wh.clamp(min=0)\n",
            "        wh = wh.clamp(min=0)\n",
        ),
    ],
    "loudness_norm": [
        NAN_GUARD,
        (
            "audio.py",
            "        out = []\n"
            "        for clip in wav:\n"
            "            rms_db = 20.0 * math.log10(clip.pow(2).mean().sqrt().item() + 1e-9)\n"
            "            if rms_db < self.silence_db:\n"
            "                out.append(clip)\n"
            "            else:\n"
            "                out.append(clip * 10.0 ** ((self.target_db - rms_db) / 20.0))\n"
            "        x = torch.stack(out)[:, None, :]\n",
            "        rms_db = 20.0 * torch.log10(wav.pow(2).mean(-1).sqrt() + 1e-9)\n"
            "        gain = torch.where(rms_db < self.silence_db, torch.ones_like(rms_db),\n"
            "                           10.0 ** ((self.target_db - rms_db) / 20.0))\n"
            "        x = (wav * gain[:, None])[:, None, :]\n",
        ),
    ],
    "yin_pitch": [
        (
            "audio.py",
            "    lags = []\n"
            "    for f, row in enumerate(below.tolist()):\n"
            "        if True in row:\n"
            "            k = row.index(True)\n"
            "        else:\n"
            "            k = int(cmnd[f].argmin())\n"
            "        lags.append(k + tau_min)\n"
            "    return sr / torch.tensor(lags, dtype=torch.float32)\n",
            "    k = torch.where(below.any(-1), below.int().argmax(-1), cmnd.argmin(-1))\n"
            "    return sr / (k + tau_min).to(torch.float32)\n",
        ),
    ],
    "onset_detect": [
        (
            "audio.py",
            "    delta = float(np.std(flux_np)) * delta_scale\n",
            "    delta = flux.std(correction=0) * delta_scale\n",
        ),
    ],
    "hf_encoder": [
        (
            "text.py",
            "        if attention_mask is not None:\n            return\n",
            "        if attention_mask is not None or torch.compiler.is_compiling():\n            return\n",
        ),
        (
            "text.py",
            "        if (attention_mask == 1).all():\n"
            "            return None  # lets the attention take its unmasked fast path\n",
            "",
        ),
    ],
    "qa_span": [
        (
            "text.py",
            "        mask = lengths_to_mask(context_lengths)\n",
            "        mask = lengths_to_mask(context_lengths, input_ids.shape[1])\n",
        ),
        (
            "text.py",
            "        start_l, end_l = start.tolist(), end.tolist()\n"
            "        spans, scores = [], []\n"
            "        for i in range(b):\n"
            "            s_top = sorted(range(t), key=lambda j: -start_l[i][j])[: self.n_best]\n"
            "            e_top = sorted(range(t), key=lambda j: -end_l[i][j])[: self.n_best]\n"
            "            best, best_score = (0, 0), -math.inf\n"
            "            for s in s_top:\n"
            "                for e in e_top:\n"
            "                    if e < s or e - s + 1 > self.max_answer_len:\n"
            "                        continue\n"
            "                    if start_l[i][s] + end_l[i][e] > best_score:\n"
            "                        best, best_score = (s, e), start_l[i][s] + end_l[i][e]\n"
            "            spans.append(best)\n"
            "            scores.append(start[i, best[0]] + end[i, best[1]])\n"
            "        return torch.tensor(spans), torch.stack(scores)\n",
            "        s_ok = torch.zeros_like(mask).scatter_(1, start.topk(self.n_best, dim=-1).indices, True)\n"
            "        e_ok = torch.zeros_like(mask).scatter_(1, end.topk(self.n_best, dim=-1).indices, True)\n"
            "        pos = torch.arange(t)\n"
            "        span_len = pos[None, :] - pos[:, None] + 1\n"
            "        band = (span_len >= 1) & (span_len <= self.max_answer_len)\n"
            "        valid = s_ok[:, :, None] & e_ok[:, None, :] & band[None]\n"
            "        pair = (start[:, :, None] + end[:, None, :]).masked_fill(~valid, float(\"-inf\"))\n"
            "        flat = pair.flatten(1).argmax(-1)\n"
            "        s_idx, e_idx = flat // t, flat % t\n"
            "        scores = start.gather(1, s_idx[:, None])[:, 0] + end.gather(1, e_idx[:, None])[:, 0]\n"
            "        return torch.stack([s_idx, e_idx], -1), scores\n",
        ),
    ],
    "rep_penalty": [
        (
            "text.py",
            "    for i in range(batch_size * num_beams):\n"
            "        for previous_token in set(prev_output_tokens[i].tolist()):\n"
            "            if lprobs[i, previous_token] < 0:\n"
            "                lprobs[i, previous_token] *= repetition_penalty\n"
            "            else:\n"
            "                lprobs[i, previous_token] /= repetition_penalty\n",
            "    seen = torch.zeros_like(lprobs, dtype=torch.bool).scatter_(1, prev_output_tokens, True)\n"
            "    penalised = torch.where(lprobs < 0, lprobs * repetition_penalty, lprobs / repetition_penalty)\n"
            "    lprobs.copy_(torch.where(seen, penalised, lprobs))\n",
        ),
    ],
    "sasrec_last": [
        (
            "recsys.py",
            "        pad_mask = lengths_to_mask(lengths)\n",
            "        pad_mask = lengths_to_mask(lengths, t)\n",
        ),
        (
            "recsys.py",
            "        last = torch.stack([h[i, n - 1] for i, n in enumerate(lengths.tolist())])\n",
            "        last = h.gather(1, (lengths - 1)[:, None, None].expand(-1, 1, h.shape[-1]))[:, 0]\n",
        ),
        (
            "recsys.py",
            "        for i in range(b):\n"
            "            seen = seq[i][seq[i] > 0]\n"
            "            scores[i, seen] = float(\"-inf\")\n"
            "        return scores\n",
            "        seen = torch.zeros_like(scores, dtype=torch.bool).scatter_(1, seq, True)\n"
            "        seen[:, 0] = False\n"
            "        return scores.masked_fill(seen, float(\"-inf\"))\n",
        ),
    ],
    "id_remap": [
        (
            "recsys.py",
            "        self.vocab = vocab\n",
            "        self.vocab = vocab\n"
            "        keys = sorted(vocab)\n"
            "        self.register_buffer(\"vocab_keys\", torch.tensor(keys, dtype=torch.long))\n"
            "        self.register_buffer(\"vocab_values\", torch.tensor([vocab[k] for k in keys], dtype=torch.long))\n",
        ),
        (
            "recsys.py",
            "        idx = torch.tensor([[self.vocab.get(r, 0) for r in row] for row in raw_ids.tolist()], dtype=torch.long)\n",
            "        pos = torch.searchsorted(self.vocab_keys, raw_ids).clamp(max=self.vocab_keys.numel() - 1)\n"
            "        idx = torch.where(self.vocab_keys[pos] == raw_ids, self.vocab_values[pos], 0)\n",
        ),
    ],
    "ppo_gae": [
        (
            "rl.py",
            "        if dones[t].item():\n"
            "            next_value = 0.0\n"
            "            lastgaelam = 0.0\n"
            "        delta = rewards[t] + gamma * next_value - values[t]\n"
            "        lastgaelam = delta + gamma * lam * lastgaelam\n",
            "        nonterminal = 1.0 - dones[t].float()\n"
            "        delta = rewards[t] + gamma * next_value * nonterminal - values[t]\n"
            "        lastgaelam = delta + gamma * lam * nonterminal * lastgaelam\n",
        ),
    ],
    "sac_alpha": [
        (
            "rl.py",
            "        self.alpha = self.log_alpha.exp().item()\n",
            "        self.alpha = self.log_alpha.exp().detach()\n",
        ),
    ],
    "schnet_radius": [
        (
            "science.py",
            "        src, dst = adj.nonzero(as_tuple=True)\n"
            "        d = dist[src, dst]\n"
            "        rbf = torch.exp(-self.gamma * (d[:, None] - self.centers) ** 2)\n"
            "        envelope = 0.5 * (torch.cos(d * math.pi / self.cutoff) + 1.0)\n"
            "        w = self.filter(rbf) * envelope[:, None]\n"
            "        msg = self.lin1(h)[src] * w\n"
            "        agg = torch.zeros_like(h).index_add_(0, dst, msg)\n",
            "        rbf = torch.exp(-self.gamma * (dist[..., None] - self.centers) ** 2)\n"
            "        envelope = 0.5 * (torch.cos(dist * math.pi / self.cutoff) + 1.0)\n"
            "        w = self.filter(rbf) * (envelope * adj)[..., None]  # (src, dst, F), zero off the edges\n"
            "        agg = torch.einsum(\"sdf,sf->df\", w, self.lin1(h))\n",
        ),
    ],
    "revin_dlinear": [
        NAN_GUARD,
        (
            "timeseries.py",
            "        if (std < self.min_std).any():\n            std = std.clamp(min=self.min_std)\n",
            "        std = std.clamp(min=self.min_std)\n",
        ),
    ],
    "gat_edges": [
        (
            "graph.py",
            "        isolated = torch.nonzero(adj.sum(1) == 0).flatten()\n"
            "        if isolated.numel() > 0:\n"
            "            adj = adj.clone()\n"
            "            adj[isolated, isolated] = True\n"
            "        dst, src = adj.nonzero(as_tuple=True)\n"
            "        h = self.lin(x).view(n, self.heads, self.d_out)\n"
            "        e = F.leaky_relu((h[src] * self.att_src).sum(-1) + (h[dst] * self.att_dst).sum(-1), 0.2)  # (E, H)\n"
            "        idx = dst[:, None].expand(-1, self.heads)\n"
            "        e_max = torch.full((n, self.heads), float(\"-inf\")).scatter_reduce(0, idx, e.detach(), \"amax\")\n"
            "        alpha = (e - e_max[dst]).exp()\n"
            "        alpha = alpha / torch.zeros(n, self.heads).index_add_(0, dst, alpha)[dst]\n"
            "        out = torch.zeros(n, self.heads, self.d_out).index_add_(0, dst, alpha[..., None] * h[src])\n",
            "        adj = adj | (torch.eye(n, dtype=torch.bool) & (adj.sum(1) == 0)[:, None])\n"
            "        h = self.lin(x).view(n, self.heads, self.d_out)\n"
            "        s_src = (h * self.att_src).sum(-1)\n"
            "        s_dst = (h * self.att_dst).sum(-1)\n"
            "        e = F.leaky_relu(s_dst[:, None, :] + s_src[None, :, :], 0.2)  # (dst, src, H)\n"
            "        alpha = e.masked_fill(~adj[..., None], float(\"-inf\")).softmax(dim=1)\n"
            "        out = torch.einsum(\"ijh,jhd->ihd\", alpha, h)\n",
        ),
    ],
    "ddim_cfg": [
        (
            "diffusion.py",
            "        alpha_prod_t = self.alphas_cumprod[timestep]\n"
            "        alpha_prod_t_prev = self.alphas_cumprod[prev_timestep] if prev_timestep >= 0 else self.final_alpha_cumprod\n",
            "        alpha_prod_t = self.alphas_cumprod.index_select(0, timestep.reshape(1)).squeeze(0)\n"
            "        alpha_prod_t_prev = torch.where(\n"
            "            prev_timestep >= 0,\n"
            "            self.alphas_cumprod.index_select(0, prev_timestep.clamp(min=0).reshape(1)).squeeze(0),\n"
            "            self.final_alpha_cumprod,\n"
            "        )\n",
        ),
        (
            "diffusion.py",
            "        out = []\n"
            "        for i in range(b):\n"
            "            s_i = min(max(float(s[i]), 1.0), self.sample_max_value)\n"
            "            out.append(sample[i].clamp(-s_i, s_i) / s_i)\n"
            "        return torch.stack(out)\n",
            "        s = s.clamp(1.0, self.sample_max_value).detach()[:, None]\n"
            "        return torch.clamp(sample, -s, s) / s\n",
        ),
    ],
    "karras_heun": [
        (
            "diffusion.py",
            "            if s_next == 0:\n"
            "                x = x + d * dt  # Euler on the last step\n"
            "            else:\n"
            "                x_2 = x + d * dt\n"
            "                d_2 = (x_2 - self.denoiser(x_2, s_next)) / s_next\n"
            "                x = x + (d + d_2) / 2 * dt\n",
            "            last = s_next == 0\n"
            "            s_eval = torch.where(last, s_cur, s_next)  # never evaluate the denoiser at sigma 0\n"
            "            x_2 = x + d * dt\n"
            "            d_2 = (x_2 - self.denoiser(x_2, s_eval)) / s_eval\n"
            "            x = torch.where(last, x_2, x + (d + d_2) / 2 * dt)\n",
        ),
    ],
    "ema_lazy": [
        (
            "training.py",
            "        self.ema = None\n",
            "        self.ema = copy.deepcopy(net)\n        self.ema.requires_grad_(False)\n",
        ),
    ],
    "skip_nonfinite": [
        (
            "training.py",
            "        total = xs.new_zeros(())\n"
            "        n_ok = 0\n"
            "        for x, y in zip(xs, ys, strict=True):\n"
            "            loss = F.mse_loss(self.net(x).squeeze(-1), y)\n"
            "            if not torch.isfinite(loss):\n"
            "                continue\n"
            "            total = total + loss\n"
            "            n_ok += 1\n"
            "        return total / max(n_ok, 1)\n",
            "        total = xs.new_zeros(())\n"
            "        n_ok = xs.new_zeros(())\n"
            "        for x, y in zip(xs, ys, strict=True):\n"
            "            pred = self.net(x).squeeze(-1)\n"
            "            ok = torch.isfinite(F.mse_loss(pred.detach(), y))\n"
            "            loss = F.mse_loss(pred, torch.where(ok, y, pred.detach()))\n"
            "            total = total + torch.where(ok, loss, torch.zeros_like(loss))\n"
            "            n_ok = n_ok + ok\n"
            "        return total / n_ok.clamp(min=1)\n",
        ),
    ],
    "dice_ignore": [
        (
            "training.py",
            "        flat_logits = logits.permute(0, 2, 3, 1)[valid]\n"
            "        flat_target = target[valid]\n"
            "        ce = F.cross_entropy(flat_logits, flat_target)\n"
            "        probs = flat_logits.softmax(-1)\n"
            "        onehot = F.one_hot(flat_target, self.n_classes).float()\n",
            "        flat_logits = logits.permute(0, 2, 3, 1).reshape(-1, self.n_classes)\n"
            "        m = valid.reshape(-1, 1).float()\n"
            "        ce = F.cross_entropy(flat_logits, target.reshape(-1), ignore_index=self.ignore_index)\n"
            "        flat_target = torch.where(valid, target, 0).reshape(-1)\n"
            "        probs = flat_logits.softmax(-1) * m\n"
            "        onehot = F.one_hot(flat_target, self.n_classes).float() * m\n",
        ),
    ],
    "ece_binned": [
        (
            "metrics.py",
            "        ece = torch.zeros(1)\n"
            "        for bin_lower, bin_upper in zip(self.bin_lowers, self.bin_uppers, strict=True):\n"
            "            in_bin = confidences.gt(bin_lower.item()) * confidences.le(bin_upper.item())\n"
            "            prop_in_bin = in_bin.float().mean()\n"
            "            if prop_in_bin.item() > 0:\n"
            "                accuracy_in_bin = accuracies[in_bin].float().mean()\n"
            "                avg_confidence_in_bin = confidences[in_bin].mean()\n"
            "                ece += torch.abs(avg_confidence_in_bin - accuracy_in_bin) * prop_in_bin\n",
            "        in_bin = confidences[None, :].gt(self.bin_lowers[:, None]) * confidences[None, :].le(self.bin_uppers[:, None])\n"
            "        count = in_bin.sum(1)\n"
            "        prop_in_bin = in_bin.float().mean(1)\n"
            "        denom = count.clamp(min=1).float()\n"
            "        accuracy_in_bin = (in_bin * accuracies[None, :]).float().sum(1) / denom\n"
            "        avg_confidence_in_bin = (in_bin * confidences[None, :]).sum(1) / denom\n"
            "        gaps = torch.where(count > 0, torch.abs(avg_confidence_in_bin - accuracy_in_bin) * prop_in_bin,\n"
            "                           torch.zeros_like(prop_in_bin))\n"
            "        ece = torch.zeros(1) + gaps.sum()\n",
        ),
    ],
    "auroc": [
        (
            "metrics.py",
            "    order = torch.argsort(scores, descending=True)\n"
            "    s = scores[order]\n"
            "    y = labels[order].float()\n"
            "    distinct = torch.where(s[1:] != s[:-1])[0]\n"
            "    threshold_idxs = torch.cat([distinct, torch.tensor([y.numel() - 1])])\n"
            "    tps = torch.cumsum(y, 0)[threshold_idxs]\n"
            "    fps = 1 + threshold_idxs - tps\n"
            "    tps = torch.cat([tps.new_zeros(1), tps])\n"
            "    fps = torch.cat([fps.new_zeros(1), fps])\n"
            "    return torch.trapezoid(tps / tps[-1], fps / fps[-1])\n",
            "    pos = labels.bool()\n"
            "    diff = scores[:, None] - scores[None, :]\n"
            "    wins = (diff > 0).float() + 0.5 * (diff == 0).float()\n"
            "    pairs = (pos[:, None] & ~pos[None, :]).float()\n"
            "    return (wins * pairs).sum() / pairs.sum()\n",
        ),
    ],
}

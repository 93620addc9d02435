"""Hand-written rewrites for the fourth held-out set: REWRITES[name] = [(file, old, new), ...].

Each keeps the program's outputs and its parameters' gradients and leaves only the
``# BREAK must-not`` lines breaking (checked by ``check.py``).
"""

from __future__ import annotations

REWRITES: dict[str, list[tuple[str, str, str]]] = {
    "gram_style": [
        ("vision.py", "w = float(self.layer_weights[i])", "w = self.layer_weights[i]"),
    ],
    "sr_psnr": [
        ("vision.py", "s = int(self.scale_t)", "s = math.isqrt(self.up.out_channels // 3)"),
    ],
    "tome_merge": [
        ("vision.py",
         "    out = []\n"
         "    for i in range(bsz):\n"
         "        acc = b[i].clone()\n"
         "        cnt = torch.ones(b.shape[1], 1)\n"
         "        for s, d in zip(src_idx[i].tolist(), dst_idx[i].tolist(), strict=True):\n"
         "            acc[d] = acc[d] + a[i, s]\n"
         "            cnt[d] += 1\n"
         "        out.append(torch.cat([a[i, unm_idx[i]], acc / cnt], 0))\n"
         "    return torch.stack(out)\n",
         "    src = a.gather(1, src_idx[..., None].expand(-1, -1, c))\n"
         "    acc = b.scatter_add(1, dst_idx[..., None].expand(-1, -1, c), src)\n"
         "    cnt = torch.ones(bsz, b.shape[1], 1).scatter_add(1, dst_idx[..., None], torch.ones(bsz, r, 1))\n"
         "    unm = a.gather(1, unm_idx[..., None].expand(-1, -1, c))\n"
         "    return torch.cat([unm, acc / cnt], 1)\n"),
    ],
    "audio_contrast_temp": [
        ("audio.py",
         "        step = self.step.item()\n"
         "        temp = max(self.t_min, self.t0 * self.decay ** step)\n",
         "        temp = (self.t0 * self.decay ** self.step.double()).clamp(min=self.t_min).float()\n"),
    ],
    "asr_length_norm": [
        ("helpers.py",
         "    rows = []\n"
         "    for b in range(scores.shape[0]):\n"
         "        row = []\n"
         "        for k in range(scores.shape[1]):\n"
         "            n = int(lengths[b, k])\n"
         "            row.append(scores[b, k] / (((5.0 + n) / 6.0) ** alpha))\n"
         "        rows.append(torch.stack(row))\n"
         "    return torch.stack(rows)\n",
         "    return scores / ((5.0 + lengths) / 6.0) ** alpha\n"),
    ],
    "popularity_bias": [
        ("ranking.py",
         "        counts = self.counts[items].tolist()\n"
         "        penalty = torch.tensor([math.log1p(c) for c in counts])\n",
         "        penalty = torch.log1p(self.counts[items])\n"),
    ],
    "lambdarank": [
        ("ranking.py",
         "    order = scores.detach().argsort(-1, descending=True).tolist()\n"
         "    ranks = torch.empty(q, d, dtype=torch.long)\n"
         "    for i in range(q):\n"
         "        for pos, doc in enumerate(order[i]):\n"
         "            ranks[i, doc] = pos\n",
         "    ranks = scores.detach().argsort(-1, descending=True).argsort(-1)\n"),
        ("ranking.py",
         "    n_pairs = int(pairs.sum())\n"
         "    return total / max(n_pairs, 1)\n",
         "    return total / pairs.sum().clamp(min=1)\n"),
    ],
    "nerf_sampler": [
        ("science.py",
         "        near = float(bounds[:, 0].min())\n"
         "        far = float(bounds[:, 1].max())\n"
         "        t = torch.linspace(near, far, self.n_samples)",
         "        near = bounds[:, 0].min()\n"
         "        far = bounds[:, 1].max()\n"
         "        t = (near + (far - near) * torch.linspace(0, 1, self.n_samples))"),
        ("science.py",
         "        if (acc < 0.99).any():\n"
         "            rgb = rgb + (1.0 - acc)[:, None]",
         "        rgb = rgb + torch.where((acc < 0.99).any(), 1.0 - acc, 0.0)[:, None]"),
    ],
    "pinn_boundary": [
        ("science.py",
         "        n_bd = int(on_bd.sum())\n"
         "        if n_bd == 0:\n"
         "            bc = x.new_zeros(())\n"
         "        else:\n"
         "            bc = self.u(x[on_bd]).pow(2).mean()\n",
         "        m = on_bd.float()\n"
         "        bc = (self.u(x).pow(2) * m).sum() / m.sum().clamp(min=1)\n"),
    ],
    "weather_nan": [
        ("science.py",
         "        loss = F.mse_loss(pred[valid], y[valid])\n",
         "        loss = torch.where(valid, pred - y.nan_to_num(), 0.0).pow(2).sum() / valid.sum()\n"),
    ],
    "hopfield": [
        ("memory.py",
         "        for _ in range(self.max_iter):\n"
         "            new = torch.softmax(self.beta * xi @ self.patterns.T, -1) @ self.patterns\n"
         "            delta = (new - xi).norm(dim=-1).max()\n"
         "            xi = new\n"
         "            if delta < self.tol:\n"
         "                break\n",
         "        done = torch.zeros((), dtype=torch.bool)\n"
         "        for _ in range(self.max_iter):\n"
         "            new = torch.softmax(self.beta * xi @ self.patterns.T, -1) @ self.patterns\n"
         "            delta = (new - xi).norm(dim=-1).max()\n"
         "            xi = torch.where(done, xi, new)\n"
         "            done = done | (delta < self.tol)\n"),
    ],
    "multitask_uncertainty": [
        ("training.py",
         "            if s.item() > self.max_log_var:\n"
         "                s = s.clamp(max=self.max_log_var)\n",
         "            s = s.clamp(max=self.max_log_var)\n"),
    ],
    "sae_resample": [
        ("training.py",
         "        idx = dead.nonzero().squeeze(1)\n"
         "        direction = F.normalize(self.W_dec.mean(0), dim=0) * 0.2\n"
         "        self.W_enc[:, idx] = direction[:, None]\n"
         "        self.b_enc[idx] = 0.0\n"
         "        self.since_fired[idx] = 0\n",
         "        direction = F.normalize(self.W_dec.mean(0), dim=0) * 0.2\n"
         "        self.W_enc.copy_(torch.where(dead[None, :], direction[:, None], self.W_enc))\n"
         "        self.b_enc.masked_fill_(dead, 0.0)\n"
         "        self.since_fired.masked_fill_(dead, 0)\n"),
    ],
    "alibi": [
        ("text.py",
         "        out = torch.empty(self.n_heads, t, t)\n"
         "        for h in range(self.n_heads):\n"
         "            out[h] = self.slopes[h].item() * rel\n"
         "        return out\n",
         "        return self.slopes[:, None, None] * rel\n"),
        ("text.py",
         "        if not pad_mask.all():\n"
         "            att = att.masked_fill(",
         "        att = att.masked_fill("),
    ],
    "scheduled_sampling": [
        ("text.py",
         "        loss = F.cross_entropy(logits[keep], tgt[keep])\n",
         "        loss = F.cross_entropy(logits.transpose(1, 2), tgt, ignore_index=self.pad)\n"),
    ],
    "ocr_blank": [
        ("text.py",
         "        if blank_ratio > 0.9:\n"
         "            logits = logits - self.penalty * self.blank_onehot\n",
         "        logits = logits - torch.where(blank_ratio > 0.9, self.penalty, 0.0) * self.blank_onehot\n"),
    ],
}

"""Hand-written rewrites for the sixth held-out set: REWRITES[name] = [(file, old, new), ...].

Each keeps the program's outputs and its parameters' gradients and leaves only the
``# BREAK must-not`` lines breaking (checked by ``check.py``).
"""

from __future__ import annotations

MASKED_MEAN = (
    "helpers.py",
    "    if mask.sum() == 0:\n"
    "        return values.sum(0) * 0.0\n"
    "    return (values * w).sum(0) / mask.sum()\n",
    "    return (values * w).sum(0) / mask.sum().clamp(min=1)\n",
)
NAN_GUARD = (
    "helpers.py",
    "    if torch.isnan(x).any():\n"
    "        x = torch.nan_to_num(x, nan=fill)\n",
    "    x = torch.where(torch.isnan(x).any(), torch.nan_to_num(x, nan=fill), x)\n",
)
WARMUP = (
    "helpers.py",
    "    s = int(step)\n"
    "    return min(1.0, (s + 1) / warmup)\n",
    "    return ((step + 1) / warmup).clamp(max=1.0)\n",
)

REWRITES: dict[str, list[tuple[str, str, str]]] = {
    "aam_speaker": [
        ("speech.py",
         "m = self.margin * min(1.0, float(self.step) / self.ramp_steps)",
         "m = self.margin * (self.step / self.ramp_steps).clamp(max=1.0)"),
        ("speech.py",
         "        n_hard = int((neg > thr).sum())\n"
         "        hard = neg.flatten().topk(max(n_hard, 1)).values\n"
         "        hard_loss = (hard - thr).clamp(min=0).sum() / max(n_hard, 1)\n",
         "        hard_loss = (neg - thr).clamp(min=0).sum() / (neg > thr).sum().clamp(min=1)\n"),
    ],
    "vad_pool": [MASKED_MEAN],
    "ecg_rpeak": [
        ("signals.py", "thr = 0.5 * float(energy.max())", "thr = 0.5 * energy.max()"),
    ],
    "ssm_scan": [
        ("signals.py",
         "            if (lengths <= start).all():\n"
         "                break\n",
         ""),
    ],
    "chamfer": [
        ("geometry.py",
         "    losses = []\n"
         "    for b, (npr, ngt) in enumerate(zip(n_pred.tolist(), n_gt.tolist(), strict=True)):\n"
         "        d = torch.cdist(pred[b, :npr], gt[b, :ngt]) ** 2\n"
         "        losses.append(d.min(1).values.mean() + d.min(0).values.mean())\n"
         "    return torch.stack(losses)\n",
         "    vp = torch.arange(pred.shape[1]) < n_pred[:, None]\n"
         "    vg = torch.arange(gt.shape[1]) < n_gt[:, None]\n"
         "    d = torch.cdist(pred, gt) ** 2\n"
         "    d_pg = d.masked_fill(~vg[:, None, :], float(\"inf\")).min(2).values\n"
         "    d_gp = d.masked_fill(~vp[:, :, None], float(\"inf\")).min(1).values\n"
         "    return (d_pg * vp).sum(1) / n_pred + (d_gp * vg).sum(1) / n_gt\n"),
    ],
    "flow_warp": [
        ("geometry.py",
         "occ_thresh = self.alpha * float(mag.max()) + self.beta",
         "occ_thresh = self.alpha * mag.max().detach() + self.beta"),
        MASKED_MEAN,
    ],
    "pose_heatmap": [
        ("vision.py",
         "        for j, c in enumerate(conf.tolist()):\n"
         "            if c < self.gate:\n"
         "                coords[j] = -1.0\n",
         "        coords = torch.where((conf < self.gate)[:, None], torch.full_like(coords, -1.0), coords)\n"),
    ],
    "weather_patch": [
        NAN_GUARD,
        ("vision.py",
         "        ocean = (land_t.mean(1) < 1).nonzero().squeeze(1)\n"
         "        tokens = self.embed(torch.cat([tiles[ocean], land_t[ocean]], 1)) + self.pos[ocean]\n"
         "        h = tokens + self.mixer(tokens + tokens.mean(0))\n"
         "        out = h.new_zeros(tiles.shape[0], h.shape[1])\n"
         "        return out.index_copy(0, ocean, F.normalize(h, dim=-1))\n",
         "        ocean = (land_t.mean(1) < 1)[:, None]\n"
         "        tokens = self.embed(torch.cat([tiles, land_t], 1)) + self.pos\n"
         "        h = tokens + self.mixer(tokens + (tokens * ocean).sum(0) / ocean.sum())\n"
         "        return torch.where(ocean, F.normalize(h, dim=-1), 0.0)\n"),
    ],
    "sinkhorn_match": [
        ("structured.py",
         "    for _ in range(max_iter):\n"
         "        u = a / (K @ v)\n"
         "        v = b / (K.T @ u)\n"
         "        if (u * (K @ v) - a).abs().sum() < tol:\n"
         "            break\n",
         "    done = torch.zeros((), dtype=torch.bool)\n"
         "    for _ in range(max_iter):\n"
         "        u = torch.where(done, u, a / (K @ v))\n"
         "        v = torch.where(done, v, b / (K.T @ u))\n"
         "        done = done | ((u * (K @ v) - a).abs().sum() < tol)\n"),
    ],
    "vq_reset": [
        ("structured.py",
         "        dead = (self.usage < self.threshold).nonzero().squeeze(1)\n"
         "        if dead.numel() > 0:\n"
         "            with torch.no_grad():\n"
         "                self.codebook[dead] = z[far.topk(dead.numel()).indices]\n",
         "        dead = self.usage < self.threshold\n"
         "        with torch.no_grad():\n"
         "            rank = (dead.cumsum(0) - 1).clamp(min=0)\n"
         "            repl = z[far.argsort(descending=True)[rank]]\n"
         "            self.codebook.copy_(torch.where(dead[:, None], repl, self.codebook))\n"),
    ],
    "ms_miner": [
        ("structured.py",
         "        a_n, i_n = hard_neg.nonzero(as_tuple=True)\n"
         "        neg_sum = sim.new_zeros(len(labels)).index_add(0, a_n, torch.exp(self.beta * (sim[a_n, i_n] - self.lam)))\n",
         "        neg_sum = (torch.exp(self.beta * (sim - self.lam)) * hard_neg).sum(1)\n"),
    ],
    "topk_pool": [
        ("structured.py",
         "        n_conn = int((deg > 0).sum())\n"
         "        k = math.ceil(self.ratio * n_conn)\n"
         "        perm = s.masked_fill(deg == 0, float(\"-inf\")).argsort(descending=True)[:k]\n"
         "        hp = h[perm] * s[perm, None]\n"
         "        return self.readout(torch.cat([hp.mean(0), hp.max(0).values]))\n",
         "        k = torch.ceil(self.ratio * (deg > 0).sum())\n"
         "        order = s.masked_fill(deg == 0, float(\"-inf\")).argsort(descending=True)\n"
         "        rank = torch.empty_like(order).scatter_(0, order, torch.arange(len(order)))\n"
         "        sel = (rank < k)[:, None]\n"
         "        hp = h * s[:, None]\n"
         "        top_max = hp.masked_fill(~sel, float(\"-inf\")).max(0).values\n"
         "        return self.readout(torch.cat([(hp * sel).sum(0) / k, top_max]))\n"),
    ],
    "ctr_calib": [
        ("tabular.py",
         "        rates, conf = p.new_zeros(self.n_bins), p.new_zeros(self.n_bins)\n"
         "        for b in range(self.n_bins):\n"
         "            in_bin = bins == b\n"
         "            if in_bin.any():\n"
         "                rates[b] = clicks[in_bin].mean()\n"
         "                conf[b] = p[in_bin].mean()\n",
         "        count = F.one_hot(bins, self.n_bins).sum(0).to(p.dtype).clamp(min=1)\n"
         "        rates = p.new_zeros(self.n_bins).scatter_add(0, bins, clicks) / count\n"
         "        conf = p.new_zeros(self.n_bins).scatter_add(0, bins, p) / count\n"),
    ],
    "tab_norm": [
        NAN_GUARD,
        ("tabular.py",
         "    def __init__(self, hidden: int = 8, momentum: float = 0.1) -> None:",
         "    def __init__(self, n_features: int, hidden: int = 8, momentum: float = 0.1) -> None:"),
        ("tabular.py",
         "        self.col_scale: nn.Parameter | None = None\n",
         "        self.col_scale = nn.Parameter(torch.ones(n_features))\n"),
        ("tabular.py",
         "            self.col_scale = nn.Parameter(torch.ones(x.shape[1]))\n",
         ""),
        ("tabular.py", "return LazyTabularNormalizer(), x", "return LazyTabularNormalizer(x.shape[1]), x"),
    ],
    "fed_avg": [
        ("tabular.py",
         "        counts = [int(n) for n in n_samples]\n"
         "        total = sum(counts)\n"
         "        agg = torch.zeros_like(self.global_w)\n"
         "        for delta, c in zip(deltas, counts, strict=True):\n"
         "            norm = float(delta.norm())\n"
         "            if norm > self.clip:\n"
         "                delta = delta * (self.clip / norm)\n"
         "            agg = agg + (c / total) * delta\n",
         "        weights = n_samples / n_samples.sum()\n"
         "        norms = deltas.norm(dim=1, keepdim=True)\n"
         "        scale = torch.where(norms > self.clip, self.clip / norms, 1.0)\n"
         "        agg = (weights[:, None] * deltas * scale).sum(0)\n"),
    ],
    "mc_dropout": [
        ("tabular.py",
         "        spread = np.log(samples.std(0).detach().numpy() + 1e-6).mean(axis=-1)\n"
         "        level = torch.from_numpy(np.digitize(spread, self.edges))\n",
         "        spread = torch.log(samples.std(0).detach() + 1e-6).mean(-1)\n"
         "        level = torch.bucketize(spread.double(), torch.from_numpy(self.edges), right=True)\n"),
    ],
    "curriculum": [
        ("training.py",
         "pct = min(100.0, self.start_pct + self.growth * self.epoch.item())",
         "pct = (self.start_pct + self.growth * self.epoch).clamp(max=100.0)"),
        MASKED_MEAN,
    ],
    "wgan_clip": [
        ("training.py",
         "        if self.step.item() % self.clip_every == 0:\n"
         "            for p in self.net.parameters():\n"
         "                p.data.clamp_(-self.c, self.c)\n",
         "        do_clip = self.step % self.clip_every == 0\n"
         "        for p in self.net.parameters():\n"
         "            p.data.copy_(torch.where(do_clip, p.data.clamp(-self.c, self.c), p.data))\n"),
    ],
    "fgsm": [
        ("training.py",
         "        x_adv = x.clone().detach().requires_grad_(True)\n"
         "        grad, = torch.autograd.grad(F.cross_entropy(self.net(x_adv), y), x_adv)\n",
         "        grad = torch.func.grad(lambda xa: F.cross_entropy(self.net(xa), y))(x.detach()).detach()\n"),
    ],
    "warmup_lora": [
        WARMUP,
        ("training.py",
         "        if self.step < self.warmup:\n"
         "            self.step += 1\n",
         "        self.step += (self.step < self.warmup).long()\n"),
    ],
    "temp_anneal": [
        ("training.py",
         "tau = max(self.tau_min, self.tau0 * math.exp(-self.rate * self.step.item()))",
         "tau = (self.tau0 * torch.exp(-self.rate * self.step)).clamp(min=self.tau_min)"),
        WARMUP,
    ],
    "length_penalty": [
        ("sequence.py",
         "        scores = []\n"
         "        for i, L in enumerate(lengths.tolist()):\n"
         "            scores.append(tok_lp[i, :L].sum() / ((5 + L) / 6) ** self.alpha)\n"
         "        scores = torch.stack(scores)\n",
         "        valid = torch.arange(hyps.shape[1]) < lengths[:, None]\n"
         "        scores = (tok_lp * valid).sum(1) / ((5 + lengths) / 6) ** self.alpha\n"),
    ],
    "window_attn": [
        ("sequence.py", "w = int(span.ceil())", "w = span.detach().ceil()"),
        ("sequence.py",
         "        if pad.any():\n"
         "            scores = scores.masked_fill(pad[:, None, :], float(\"-inf\"))\n",
         "        scores = scores.masked_fill(pad[:, None, :], float(\"-inf\"))\n"),
    ],
    "kv_evict": [
        ("sequence.py",
         "                victim = int(acc[: -self.recent].argmin())\n"
         "                keep = [j for j in range(K.shape[0]) if j != victim]\n",
         "                victim = acc[: -self.recent].argmin()\n"
         "                keep = torch.arange(K.shape[0] - 1)\n"
         "                keep = keep + (keep >= victim).long()\n"),
    ],
}

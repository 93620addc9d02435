"""Hand-written rewrites for the fifth held-out set: REWRITES[name] = [(file, old, new), ...].

Each keeps the program's outputs and its parameters' gradients and leaves only the
``# BREAK must-not`` lines breaking (checked by ``check.py``).
"""

from __future__ import annotations

REWRITES: dict[str, list[tuple[str, str, str]]] = {
    "realnvp_invert": [
        ("helpers.py",
         "    if x.min() < 0 or x.max() > 1:\n"
         "        x = x.clamp(0.0, 1.0)\n",
         "    x = x.clamp(0.0, 1.0)\n"),
        ("flows.py", "cap = float(self.scale_cap)", "cap = self.scale_cap"),
    ],
    "ode_capped_euler": [
        ("flows.py",
         "            kmax = float(k.abs().max())\n"
         "            dt = self.dt if kmax * self.dt <= self.max_change else self.max_change / kmax\n",
         "            dt = (self.max_change / k.detach().abs().max()).clamp(max=self.dt)\n"),
    ],
    "iou_tracker": [
        ("helpers.py",
         "    pairs = []\n"
         "    for _ in range(min(iou.shape)):\n"
         "        best, flat = iou.flatten().max(0)\n"
         "        if best < thresh:\n"
         "            break\n"
         "        r, c = divmod(int(flat), iou.shape[1])\n"
         "        pairs.append((r, c))\n"
         "        iou[r, :] = -1.0\n"
         "        iou[:, c] = -1.0\n"
         "    return pairs\n",
         "    rows, cols = torch.arange(iou.shape[0]), torch.arange(iou.shape[1])\n"
         "    match = torch.full((iou.shape[0],), -1)\n"
         "    for _ in range(min(iou.shape)):\n"
         "        best, flat = iou.flatten().max(0)\n"
         "        ok = best >= thresh\n"
         "        r, c = flat // iou.shape[1], flat % iou.shape[1]\n"
         "        match = torch.where(ok & (rows == r), c, match)\n"
         "        iou = torch.where(ok & ((rows[:, None] == r) | (cols[None, :] == c)), -1.0, iou)\n"
         "    return match\n"),
        ("perception.py",
         "        dets = dets[scores > self.min_score]\n"
         "        iou = box_iou(pred, dets)\n"
         "        updated = pred.clone()\n"
         "        for i, j in greedy_match(iou, self.iou_thresh):\n"
         "            updated[i] = self.alpha * dets[j] + (1 - self.alpha) * pred[i]\n"
         "        return updated\n",
         "        iou = box_iou(pred, dets).masked_fill(~(scores > self.min_score), -1.0)\n"
         "        match = greedy_match(iou, self.iou_thresh)\n"
         "        blended = self.alpha * dets[match.clamp(min=0)] + (1 - self.alpha) * pred\n"
         "        return torch.where((match >= 0)[:, None], blended, pred)\n"),
    ],
    "clip_sampler": [
        ("perception.py",
         "        for b, n in enumerate(lengths.tolist()):\n"
         "            score[b, n:] = float(\"-inf\")\n",
         "        score = score.masked_fill(torch.arange(score.shape[1]) >= lengths[:, None], float(\"-inf\"))\n"),
    ],
    "depth_silog": [
        ("perception.py",
         "        d = torch.log(pred[valid]) - torch.log(gt[valid])\n"
         "        loss = torch.sqrt((d**2).mean() - self.lam * d.mean() ** 2) * 10.0\n",
         "        d = torch.where(valid, torch.log(pred) - torch.log(gt.clamp(min=self.min_depth)), 0.0)\n"
         "        n = valid.sum()\n"
         "        loss = torch.sqrt((d**2).sum() / n - self.lam * (d.sum() / n) ** 2) * 10.0\n"),
    ],
    "voxel_occupancy": [
        ("perception.py",
         "        half = float((points - center).abs().max()) * self.margin\n"
         "        grid = voxelize(points, center - half, 2 * half / self.res, self.res)\n",
         "        half = (points - center).abs().max().double() * self.margin\n"
         "        grid = voxelize(points, center - half.float(), (2 * half / self.res).float(), self.res)\n"),
        ("helpers.py",
         "    idx = idx[inside]\n"
         "    grid = torch.zeros(res, res, res)\n"
         "    grid[idx[:, 0], idx[:, 1], idx[:, 2]] = 1.0\n"
         "    return grid\n",
         "    idx = idx.clamp(0, res - 1)\n"
         "    flat = (idx[:, 0] * res + idx[:, 1]) * res + idx[:, 2]\n"
         "    grid = torch.zeros(res**3).scatter_reduce(0, flat, inside.float(), reduce=\"amax\")\n"
         "    return grid.view(res, res, res)\n"),
    ],
    "cox_loss": [
        ("health.py",
         "        n_events = int(events.sum())\n"
         "        if n_events == 0:\n"
         "            loss = risk.sum() * 0.0\n"
         "        else:\n"
         "            loss = -((risk_o - log_risk_set) * events_o).sum() / n_events\n",
         "        loss = -((risk_o - log_risk_set) * events_o).sum() / events.sum().clamp(min=1)\n"),
    ],
    "ts_impute": [
        ("helpers.py",
         "    rows = mask.tolist()\n"
         "    gaps = []\n"
         "    for seq in rows:\n"
         "        prev = [0.0] * len(seq[0])\n"
         "        out = [prev]\n"
         "        for t in range(1, len(seq)):\n"
         "            prev = [1.0 + (1.0 - m) * g for m, g in zip(seq[t - 1], prev, strict=True)]\n"
         "            out.append(prev)\n"
         "        gaps.append(out)\n"
         "    return torch.tensor(gaps)\n",
         "    gaps = [torch.zeros_like(mask[:, 0])]\n"
         "    for t in range(1, mask.shape[1]):\n"
         "        gaps.append(1.0 + (1.0 - mask[:, t - 1]) * gaps[-1])\n"
         "    return torch.stack(gaps, 1)\n"),
        ("health.py",
         "            if m_t.all():\n"
         "                x_c = x_t\n"
         "            else:\n"
         "                x_c = m_t * x_t + (1 - m_t) * x_hat\n",
         "            x_c = m_t * x_t + (1 - m_t) * x_hat\n"),
    ],
    "protein_pool": [
        ("health.py",
         "        max_len = int(lengths.max())\n"
         "        tokens = tokens[:, :max_len]\n",
         ""),
        ("health.py",
         "        pooled = torch.stack([h[i, :n].mean(0) for i, n in enumerate(lengths.tolist())])\n",
         "        pooled = h.sum(1) / lengths[:, None]\n"),
    ],
    "diverse_rerank": [
        ("recsys.py",
         "rel = (rel - rel.mean()) / max(self.temp_floor, float(rel.std()))",
         "rel = (rel - rel.mean()) / rel.std().detach().clamp(min=self.temp_floor)"),
        ("recsys.py",
         "        chosen: list[int] = []\n"
         "        for _ in range(self.k):\n"
         "            penalty = sim[:, chosen].max(1).values if chosen else torch.zeros_like(rel)\n"
         "            mmr = self.lam * rel - (1 - self.lam) * penalty\n"
         "            if chosen:\n"
         "                mmr[chosen] = float(\"-inf\")\n"
         "            chosen.append(int(mmr.argmax()))\n"
         "        order = torch.tensor(chosen)\n",
         "        taken = torch.zeros(len(rel), dtype=torch.bool)\n"
         "        penalty = torch.zeros_like(rel)\n"
         "        chosen = []\n"
         "        for i in range(self.k):\n"
         "            mmr = (self.lam * rel - (1 - self.lam) * penalty).masked_fill(taken, float(\"-inf\"))\n"
         "            best = mmr.argmax()\n"
         "            chosen.append(best)\n"
         "            taken = taken | (torch.arange(len(rel)) == best)\n"
         "            col = sim.index_select(1, best.view(1)).squeeze(1)\n"
         "            penalty = col if i == 0 else torch.maximum(penalty, col)\n"
         "        order = torch.stack(chosen)\n"),
    ],
    "retrieval_memory": [
        ("recsys.py",
         "            filled = int(self.filled)\n"
         "            scores[:, filled:] = float(\"-inf\")\n",
         "            scores = scores.masked_fill(torch.arange(len(self.keys)) >= self.filled, float(\"-inf\"))\n"),
        ("recsys.py",
         "        ptr = int(self.ptr)\n"
         "        self.keys[ptr : ptr + len(k)] = k\n"
         "        self.values[ptr : ptr + len(k)] = v\n"
         "        self.ptr.fill_((ptr + len(k)) % len(self.keys))\n",
         "        slots = (self.ptr + torch.arange(len(k))) % len(self.keys)\n"
         "        self.keys.index_copy_(0, slots, k)\n"
         "        self.values.index_copy_(0, slots, v)\n"
         "        self.ptr.copy_((self.ptr + len(k)) % len(self.keys))\n"),
    ],
    "learned_lr": [
        ("helpers.py",
         "    total = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))\n"
         "    return min(1.0, max_norm / (total + eps))\n",
         "    total = torch.sqrt(sum(g.pow(2).sum() for g in grads))\n"
         "    return torch.clamp(max_norm / (total + eps), max=1.0)\n"),
        ("training.py",
         "        if self.step < self.warmup:\n"
         "            lr = lr * (self.step + 1) / self.warmup\n",
         "        lr = lr * torch.clamp((self.step + 1) / self.warmup, max=1.0)\n"),
    ],
    "wd_schedule": [
        ("helpers.py",
         "    progress = min(1.0, float(step) / total)\n"
         "    return end + 0.5 * (start - end) * (1 + math.cos(math.pi * progress))\n",
         "    progress = torch.clamp(step / total, max=1.0)\n"
         "    return end + 0.5 * (start - end) * (1 + torch.cos(math.pi * progress))\n"),
    ],
    "ema_teacher": [
        ("training.py",
         "        m = 1 - (1 - self.base) * (math.cos(math.pi * self.step.item() / self.total) + 1) / 2\n"
         "        for pt, ps in zip(self.teacher.parameters(), self.student.parameters(), strict=True):\n"
         "            pt.mul_(m).add_(ps, alpha=1 - m)\n",
         "        m = 1 - (1 - self.base) * (torch.cos(math.pi * self.step / self.total) + 1) / 2\n"
         "        for pt, ps in zip(self.teacher.parameters(), self.student.parameters(), strict=True):\n"
         "            pt.mul_(m).add_((1 - m) * ps)\n"),
        ("training.py",
         "            if self.center_ready:\n"
         "                self.center.mul_(0.9).add_(0.1 * t.mean(0))\n"
         "            else:\n"
         "                self.center.copy_(t.mean(0))\n"
         "                self.center_ready.fill_(True)\n",
         "            self.center.copy_(torch.where(self.center_ready, self.center * 0.9 + 0.1 * t.mean(0), t.mean(0)))\n"
         "            self.center_ready.fill_(True)\n"),
    ],
    "quantile_clip": [
        ("helpers.py",
         "    return float(torch.quantile(x.detach().abs().flatten(), q))\n",
         "    return torch.quantile(x.detach().abs().flatten(), q)\n"),
        ("training.py",
         "        self.clip_count += int((h.abs() > thr).sum())\n",
         "        self.clip_count += (h.abs() > thr).sum()\n"),
    ],
    "stochastic_depth": [
        ("training.py",
         "        self.drop_rates = torch.linspace(0, drop, depth)\n",
         "        self.drop_rates = torch.linspace(0, drop, depth).tolist()\n"),
        ("training.py", "        rates = self.drop_rates.tolist()\n", "        rates = self.drop_rates\n"),
    ],
    "midi_lm": [
        ("helpers.py",
         "    out = []\n"
         "    for row in tokens.tolist():\n"
         "        clock, times = 0, []\n"
         "        for tok in row:\n"
         "            if tok >= shift_offset:\n"
         "                clock += tok - shift_offset + 1\n"
         "            times.append(float(clock))\n"
         "        out.append(times)\n"
         "    return torch.tensor(out)\n",
         "    shift = torch.where(tokens >= shift_offset, tokens - shift_offset + 1, 0)\n"
         "    return shift.cumsum(1).float()\n"),
    ],
    "ngram_block": [
        ("helpers.py",
         "def ngram_banned(seq: torch.Tensor, n: int) -> list[list[int]]:\n",
         "def ngram_banned(seq: torch.Tensor, n: int, vocab: int) -> torch.Tensor:\n"),
        ("helpers.py",
         "    banned = []\n"
         "    for row in seq.tolist():\n"
         "        seen: dict[tuple[int, ...], list[int]] = {}\n"
         "        for i in range(len(row) - n + 1):\n"
         "            seen.setdefault(tuple(row[i : i + n - 1]), []).append(row[i + n - 1])\n"
         "        banned.append(seen.get(tuple(row[len(row) - n + 1 :]), []))\n"
         "    return banned\n",
         "    win = seq.unfold(1, n, 1)\n"
         "    hit = (win[..., :-1] == seq[:, None, seq.shape[1] - n + 1 :]).all(-1)\n"
         "    return torch.zeros(seq.shape[0], vocab).scatter_add(1, win[..., -1], hit.float()) > 0\n"),
        ("sequence.py",
         "            for b, toks in enumerate(ngram_banned(seq, self.n)):\n"
         "                if toks:\n"
         "                    logits[b, toks] = float(\"-inf\")\n",
         "            logits = logits.masked_fill(ngram_banned(seq, self.n, logits.shape[-1]), float(\"-inf\"))\n"),
    ],
    "token_drop": [
        ("sequence.py",
         "        k = max(1, int(self.capacity * mask.sum(1).min()))\n"
         "        top, idx = scores.topk(k, dim=1)\n"
         "        sel = x.gather(1, idx[..., None].expand(-1, -1, x.shape[-1]))\n"
         "        upd = self.mlp(sel) * torch.sigmoid(top)[..., None]\n"
         "        return x.scatter_add(1, idx[..., None].expand_as(upd), upd)\n",
         "        k = (self.capacity * mask.sum(1).min()).floor().clamp(min=1)\n"
         "        rank = scores.argsort(1, descending=True).argsort(1)\n"
         "        keep = (rank < k).to(x.dtype)[..., None]\n"
         "        return x + self.mlp(x) * torch.sigmoid(scores)[..., None] * keep\n"),
    ],
    "reward_pairwise": [
        ("helpers.py",
         "    ends = (mask.sum(1) - 1).tolist()\n"
         "    return torch.stack([h[i, e] for i, e in enumerate(ends)])\n",
         "    return h[torch.arange(len(h)), mask.sum(1) - 1]\n"),
    ],
    "particle_bounce": [
        ("physics.py",
         "        if not out.any():\n"
         "            return pos, vel\n",
         ""),
    ],
}

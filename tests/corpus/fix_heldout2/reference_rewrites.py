"""Hand-written rewrites of the fixable sites, one list per program: (file, old, new).

``check.py`` strips the ``# BREAK`` comments from a copy of the package, replaces each ``old``
(found exactly once) with ``new``, compiles the patched program and compares its outputs and
gradients with the original's in eager.  Written by the set's author, without dynscope.
"""

from __future__ import annotations

REWRITES: dict[str, list[tuple[str, str, str]]] = {
    "ddpm_step": [
        ("diffusion.py",
         """        if torch.isnan(eps).any():
            raise FloatingPointError(f"NaN in the model output at timestep {timestep}")
""",
         """        torch._assert_async(~torch.isnan(eps).any(), "NaN in the model output")
"""),
        ("diffusion.py",
         """        t = int(timestep)
        prev_t = t - 1

        alpha_prod_t = self.alphas_cumprod[t]
        alpha_prod_t_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else self.one
""",
         """        t = timestep.view(1)
        prev_t = t - 1

        alpha_prod_t = self.alphas_cumprod.index_select(0, t)[0]
        alpha_prod_t_prev = torch.where(prev_t >= 0, self.alphas_cumprod.index_select(0, prev_t.clamp(min=0)), self.one)[0]
"""),
        ("diffusion.py",
         """        if t > 0:
            variance = (1 - alpha_prod_t_prev) / (1 - alpha_prod_t) * current_beta_t
            variance = torch.clamp(variance, min=1e-20)
            pred_prev_sample = pred_prev_sample + variance ** 0.5 * noise
""",
         """        variance = (1 - alpha_prod_t_prev) / (1 - alpha_prod_t) * current_beta_t
        variance = torch.clamp(variance, min=1e-20)
        pred_prev_sample = pred_prev_sample + torch.where(t[0] > 0, variance ** 0.5, 0.0) * noise
"""),
    ],
    "ddim_sample": [
        ("diffusion.py",
         """        alpha_prod_t = self.alphas_cumprod[timestep]
        alpha_prod_t_prev = self.alphas_cumprod[prev_timestep] if prev_timestep >= 0 else self.final_alpha_cumprod
""",
         """        alpha_prod_t = self.alphas_cumprod.index_select(0, timestep.view(1))[0]
        alpha_prod_t_prev = torch.where(prev_timestep >= 0,
                                        self.alphas_cumprod.index_select(0, prev_timestep.clamp(min=0).view(1))[0],
                                        self.final_alpha_cumprod)
"""),
    ],
    "t5_position_bias": [
        ("text.py", "        key_length = int(cache_position[-1]) + 1\n", "        key_length = key.shape[2]\n"),
        ("text.py", "        if attention_mask is not None and not attention_mask.all():\n",
         "        if attention_mask is not None:\n"),
    ],
    "ctc_greedy_decode": [
        ("text.py", "        pad_mask = make_pad_mask(out_lens)\n", "        pad_mask = make_pad_mask(out_lens, x.shape[1])\n"),
        ("helpers.py",
         """    scores = []
    for lp, n in zip(log_probs, lengths, strict=True):
        scores.append(lp[:n].max(dim=-1).values.mean())
    return torch.stack(scores)
""",
         """    valid = ~make_pad_mask(lengths, log_probs.shape[1])
    best = log_probs.max(dim=-1).values
    return (best * valid).sum(dim=1) / lengths
"""),
    ],
    "decoder_inputs": [
        ("text.py", "    if (attention_mask[:, -1] == 0).any():\n",
         "    if not torch.compiler.is_compiling() and (attention_mask[:, -1] == 0).any():\n"),
    ],
    "clip_loss": [
        ("contrastive.py",
         """        if self.logit_scale.item() > math.log(100):
            with torch.no_grad():
                self.logit_scale.fill_(math.log(100))
""",
         """        with torch.no_grad():
            self.logit_scale.clamp_(max=math.log(100))
"""),
    ],
    "triplet_hard_mining": [
        ("contrastive.py", "        hardest_pos.append(dist[i][pos_mask].max())\n",
         '        hardest_pos.append(dist[i].masked_fill(~pos_mask, float("-inf")).max())\n'),
        ("contrastive.py",
         """        num_active = int((losses > 0).sum())
        loss = losses.sum() / max(num_active, 1)
""",
         """        num_active = (losses > 0).sum()
        loss = losses.sum() / num_active.clamp(min=1)
"""),
    ],
    "kd_temperature": [
        ("contrastive.py", "        progress = min(self.step.item() / self.total_steps, 1.0)\n",
         "        progress = (self.step / self.total_steps).clamp(max=1.0)\n"),
        ("contrastive.py", "        if self.step % self.log_every == 0:\n",
         "        if not torch.compiler.is_compiling() and self.step % self.log_every == 0:\n"),
    ],
    "gcn_layer": [
        ("graph.py",
         """        row, col = edge_index
        edge_index = edge_index[:, row != col]
        loop_index = torch.arange(num_nodes)
        edge_index = torch.cat([edge_index, torch.stack([loop_index, loop_index])], dim=1)

        row, col = edge_index
        deg = torch.bincount(col, minlength=num_nodes).to(x.dtype)
        deg_inv_sqrt = deg.pow(-0.5)
        deg_inv_sqrt[deg_inv_sqrt == float("inf")] = 0
        norm = deg_inv_sqrt[row] * deg_inv_sqrt[col]
""",
         """        row, col = edge_index
        edge_weight = (row != col).to(x.dtype)
        loop_index = torch.arange(num_nodes)
        edge_index = torch.cat([edge_index, torch.stack([loop_index, loop_index])], dim=1)
        edge_weight = torch.cat([edge_weight, torch.ones(num_nodes, dtype=x.dtype)])

        row, col = edge_index
        deg = torch.zeros(num_nodes, dtype=x.dtype).index_add_(0, col, edge_weight)
        deg_inv_sqrt = deg.pow(-0.5)
        deg_inv_sqrt[deg_inv_sqrt == float("inf")] = 0
        norm = deg_inv_sqrt[row] * deg_inv_sqrt[col] * edge_weight
"""),
    ],
    "graphsage_neighbors": [
        ("graph.py",
         """        neighbors = build_adjacency(edge_index, num_nodes)
        aggregated = []
        for i in range(num_nodes):
            nbrs = neighbors[i]
            aggregated.append(x[nbrs].mean(dim=0) if nbrs else x.new_zeros(x.size(1)))
        h = self.lin_self(x) + self.lin_neigh(torch.stack(aggregated))
""",
         """        src, dst = edge_index
        summed = torch.zeros_like(x).index_add_(0, dst, x[src])
        aggregated = summed / in_degree.clamp(min=1).to(x.dtype)[:, None]
        h = self.lin_self(x) + self.lin_neigh(aggregated)
"""),
    ],
    "tree_rnn": [
        ("graph.py",
         """        children: list[list[int]] = [[] for _ in range(x.size(0))]
        root = 0
        for node, parent in enumerate(parents.tolist()):
            if parent < 0:
                root = node
            else:
                children[parent].append(node)
        return self.classifier(self.encode(root, x, children))
""",
         """        n = x.size(0)
        has_parent = parents >= 0
        child_matrix = torch.zeros(n, n).index_put_((parents.clamp(min=0), torch.arange(n)), has_parent.float(),
                                                    accumulate=True)
        wx = self.W(x)
        h = x.new_zeros(n, self.hidden)
        for _ in range(n):  # n sweeps reach every node's recursive state: a tree has depth < n
            h = torch.tanh(wx + self.U(child_matrix @ h))
        root_state = (h * (~has_parent).to(h.dtype)[:, None]).sum(dim=0)
        return self.classifier(root_state)
"""),
    ],
    "dlrm_embedding_bags": [
        ("recsys.py", "from .helpers import NUM_HASH_BUCKETS, hash_feature, pooled_lookup\n",
         "from .helpers import HASH_MULTIPLIER, NUM_HASH_BUCKETS, pooled_lookup\n"),
        ("recsys.py", "            hashed = torch.tensor([hash_feature(v, salt=f) for v in ids.tolist()])\n",
         "            hashed = (ids * HASH_MULTIPLIER + f) % NUM_HASH_BUCKETS\n"),
        ("helpers.py",
         """    bounds = offsets.tolist() + [ids.numel()]
    bags = []
    for b in range(len(bounds) - 1):
        bags.append(table(ids[bounds[b]:bounds[b + 1]]).sum(dim=0))
    return torch.stack(bags)
""",
         """    segment = torch.searchsorted(offsets, torch.arange(ids.numel()), right=True) - 1
    return torch.zeros(offsets.numel(), table.embedding_dim).index_add_(0, segment, table(ids))
"""),
    ],
    "vae_kl_anneal": [
        ("generative.py",
         """        kl_term = kl
        if kl < self.free_bits:
            kl_term = kl.new_tensor(self.free_bits)
        beta = min(1.0, self.global_step.item() / self.anneal_steps)
""",
         """        kl_term = torch.clamp(kl, min=self.free_bits)
        beta = (self.global_step / self.anneal_steps).clamp(max=1.0)
"""),
    ],
    "mdn_head": [
        ("generative.py", "        if (sigma < 1e-3).any():\n",
         "        if not torch.compiler.is_compiling() and (sigma < 1e-3).any():\n"),
    ],
    "kalman_filter": [
        ("timeseries.py",
         """            y = ys[t]
            if torch.isnan(y).any():
                filtered.append(x)
                continue
            S = H @ P @ H.T + R
            K = P @ H.T @ torch.linalg.inv(S)
            innovation = y - H @ x
            x = x + K @ innovation
            P = (eye - K @ H) @ P
            nll = nll + 0.5 * (innovation @ torch.linalg.solve(S, innovation) + torch.logdet(S))
""",
         """            y = ys[t]
            observed = ~torch.isnan(y).any()
            y = torch.nan_to_num(y)  # a NaN in the branch not taken would still poison the gradients
            S = H @ P @ H.T + R
            K = P @ H.T @ torch.linalg.inv(S)
            innovation = y - H @ x
            x = torch.where(observed, x + K @ innovation, x)
            P = torch.where(observed, (eye - K @ H) @ P, P)
            step_nll = 0.5 * (innovation @ torch.linalg.solve(S, innovation) + torch.logdet(S))
            nll = nll + torch.where(observed, step_nll, 0.0)
"""),
    ],
    "seg_postprocess": [
        ("vision.py",
         """        low_fraction = (confidence < self.min_confidence).float().mean().item()
        if low_fraction > 0.5:
            pred = torch.full_like(pred, self.ignore_index)  # the whole image is unreliable
        else:
            pred = torch.where(confidence < self.min_confidence, torch.full_like(pred, self.ignore_index), pred)
""",
         """        low = confidence < self.min_confidence
        low_fraction = low.float().mean()
        pred = torch.where((low_fraction > 0.5) | low, torch.full_like(pred, self.ignore_index), pred)
"""),
    ],
    "mae_vit_patches": [
        ("vision.py",
         """        x_visible = x[~mask].reshape(B, len_keep, D)
        logger.debug("MAE: %d visible patches of %d", x_visible.shape[1], N)
""",
         """        ids_keep = ids_shuffle[:, :len_keep].sort(dim=1).values  # x[~mask] keeps patch order
        x_visible = torch.gather(x, 1, ids_keep[:, :, None].expand(-1, -1, D))
        if not torch.compiler.is_compiling():
            logger.debug("MAE: %d visible patches of %d", x_visible.shape[1], N)
"""),
    ],
    "amp_loss_scale": [
        ("losses.py",
         """        if torch.isfinite(loss):
            self.good_steps += 1
            if self.good_steps.item() % self.growth_interval == 0:
                self.loss_scale *= 2.0
        else:
            self.loss_scale /= 2.0
            self.good_steps.zero_()
""",
         """        finite = torch.isfinite(loss)
        good_steps = torch.where(finite, self.good_steps + 1, torch.zeros_like(self.good_steps))
        grow = finite & (good_steps % self.growth_interval == 0)
        self.loss_scale.copy_(torch.where(finite, torch.where(grow, self.loss_scale * 2.0, self.loss_scale),
                                          self.loss_scale / 2.0))
        self.good_steps.copy_(good_steps)
"""),
    ],
    "label_smoothing": [
        ("losses.py",
         """        ntokens = int(target.ne(self.ignore_index).sum())
        loss = loss / max(ntokens, 1)
""",
         """        ntokens = target.ne(self.ignore_index).sum()
        loss = loss / ntokens.clamp(min=1)
"""),
    ],
    "curriculum_sampler": [
        ("losses.py", "    lo, hi = difficulty.min().item(), difficulty.max().item()\n",
         "    lo, hi = difficulty.min(), difficulty.max()\n"),
    ],
}

"""Hand-written reference rewrites for the eleventh held-out set: per program, exact-text replacements
``(file, old, new)`` applied to a copy of the package whose ``# BREAK`` comments were stripped. Applied
together they remove every fixable break of the program while keeping its outputs and its parameters'
gradients (``check.py`` verifies both against the original run in eager)."""

from __future__ import annotations

# --------------------------------------------------------------------------- helpers.py (shared)

MASKED_MEAN = (
    "helpers.py",
    "    return x[mask.bool()].mean()\n",
    "    mask = mask.to(x.dtype)\n    return (x * mask).sum() / mask.sum()\n",
)

# --------------------------------------------------------------------------- sequence.py

MAMBA_VARLEN = [
    (
        "sequence.py",
        "def selective_scan_ref(u, delta, A, B, C, D, delta_bias=None, delta_softplus=True):",
        "def selective_scan_ref(u, delta, A, B, C, D, delta_bias=None, delta_softplus=True, keep=None):",
    ),
    (
        "sequence.py",
        "        x = deltaA[:, :, i] * x + deltaB_u[:, :, i]\n",
        "        if keep is not None:\n            x = x * keep[i]\n        x = deltaA[:, :, i] * x + deltaB_u[:, :, i]\n",
    ),
    (
        "sequence.py",
        "    def forward(self, hidden_states):\n        xz = self.in_proj(hidden_states)",
        "    def forward(self, hidden_states, keep=None):\n        xz = self.in_proj(hidden_states)",
    ),
    (
        "sequence.py",
        "                               delta_bias=self.dt_proj.bias.float())",
        "                               delta_bias=self.dt_proj.bias.float(), keep=keep)",
    ),
    (
        "sequence.py",
        """        outs = []
        # every sequence starts from a zero SSM state: scan the packed row one sequence at a time
        for start, end in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist(), strict=True):
            outs.append(self.mixer(hidden_states[:, start:end]))
        hidden_states = hidden_states + torch.cat(outs, dim=1)
""",
        """        # every sequence starts from a zero SSM state: zero the carried state where a sequence starts
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        keep = (pos[:, None] != cu_seqlens[None, :-1]).all(dim=-1).to(hidden_states.dtype)
        hidden_states = hidden_states + self.mixer(hidden_states, keep)
""",
    ),
]

LONGFORMER = [
    (
        "sequence.py",
        "        is_global_attn = is_index_global_attn.flatten().any().item()\n",
        "",
    ),
    (
        "sequence.py",
        """        if is_global_attn:
            _, (batch_idx, token_idx), _ = self._get_global_attn_indices(is_index_global_attn)
            key_is_global = torch.zeros_like(is_index_global_attn)
            key_is_global[batch_idx, token_idx] = True
            allowed = allowed | key_is_global[:, None, None, :]
""",
        "        allowed = allowed | is_index_global_attn[:, None, None, :]\n",
    ),
    (
        "sequence.py",
        """        if is_global_attn:
            # global tokens attend to every (unmasked) token with their own projections
            qg = self._split(self.query_global(hidden_states)) / math.sqrt(self.head_dim)
            kg = self._split(self.key_global(hidden_states))
            vg = self._split(self.value_global(hidden_states))
            g_scores = (qg @ kg.transpose(-1, -2)).masked_fill(is_index_masked[:, None, None, :], float("-inf"))
            g_out = (g_scores.softmax(-1) @ vg).transpose(1, 2).reshape(b, t, -1)
            out[batch_idx, token_idx] = g_out[batch_idx, token_idx]
""",
        """        # global tokens attend to every (unmasked) token with their own projections
        qg = self._split(self.query_global(hidden_states)) / math.sqrt(self.head_dim)
        kg = self._split(self.key_global(hidden_states))
        vg = self._split(self.value_global(hidden_states))
        g_scores = (qg @ kg.transpose(-1, -2)).masked_fill(is_index_masked[:, None, None, :], float("-inf"))
        g_out = (g_scores.softmax(-1) @ vg).transpose(1, 2).reshape(b, t, -1)
        out = torch.where(is_index_global_attn[..., None], g_out, out)
""",
    ),
]

ELECTRA = [
    (
        "sequence.py",
        """        non_padded_indices = torch.nonzero(input != self.pad_token_id, as_tuple=True)
        disc_loss = F.binary_cross_entropy_with_logits(disc_logits[non_padded_indices], disc_labels[non_padded_indices])
""",
        """        non_pad = (input != self.pad_token_id).to(disc_logits.dtype)
        disc_loss = (F.binary_cross_entropy_with_logits(disc_logits, disc_labels, reduction="none") * non_pad).sum() / non_pad.sum()
""",
    ),
    (
        "sequence.py",
        "            gen_acc = (gen_labels[mask] == gen_predictions[mask]).float().mean()\n",
        "            gen_acc = ((gen_labels == gen_predictions) & mask).float().sum() / mask.float().sum()\n",
    ),
    (
        "sequence.py",
        "            disc_acc = 0.5 * (disc_labels[mask] == disc_predictions[mask]).float().mean() + 0.5 * (disc_labels[~mask] == disc_predictions[~mask]).float().mean()\n",
        """            disc_hit = disc_labels == disc_predictions
            disc_acc = 0.5 * (disc_hit & mask).float().sum() / mask.float().sum() + 0.5 * (disc_hit & ~mask).float().sum() / (~mask).float().sum()
""",
    ),
]

REWRITES: dict[str, list[tuple[str, str, str]]] = {
    "mamba_varlen": MAMBA_VARLEN,
    "longformer_global": LONGFORMER,
    "electra_pretrain": ELECTRA,
}

# --------------------------------------------------------------------------- selfsup.py

DINO = [
    (
        "selfsup.py",
        """        idx_crops = torch.cumsum(torch.unique_consecutive(
            torch.tensor([inp.shape[-1] for inp in x]),
            return_counts=True,
        )[1], 0)
""",
        """        idx_crops = []
        for i, inp in enumerate(x):
            if i > 0 and inp.shape[-1] != x[i - 1].shape[-1]:
                idx_crops.append(i)
        idx_crops.append(len(x))
""",
    ),
]

BYOL = [
    (
        "selfsup.py",
        "        self.target_encoder = None\n",
        "        self.target_encoder = copy.deepcopy(self.online_encoder)\n        set_requires_grad(self.target_encoder, False)\n",
    ),
]

FLEXMATCH = [
    (
        "selfsup.py",
        """        pseudo_counter = Counter(self.selected_label.tolist())
        if max(pseudo_counter.values()) < self.ulb_dest_len:  # not all(5w) -1
            if self.thresh_warmup:
                for i in range(self.num_classes):
                    self.classwise_acc[i] = pseudo_counter[i] / max(pseudo_counter.values())
            else:
                wo_negative_one = copy.deepcopy(pseudo_counter)
                if -1 in wo_negative_one.keys():
                    wo_negative_one.pop(-1)
                for i in range(self.num_classes):
                    self.classwise_acc[i] = pseudo_counter[i] / max(wo_negative_one.values())
""",
        """        counts = F.one_hot(self.selected_label + 1, self.num_classes + 1).sum(0)  # counts[0]: still unselected (-1)
        denom = counts.max() if self.thresh_warmup else counts[1:].max()
        acc = counts[1:].to(self.classwise_acc.dtype) / denom
        self.classwise_acc.copy_(torch.where(counts.max() < self.ulb_dest_len, acc, self.classwise_acc))
""",
    ),
    (
        "selfsup.py",
        """        if idx_ulb[select == 1].nelement() != 0:
            self.selected_label[idx_ulb[select == 1]] = max_idx[select == 1]
""",
        "        self.selected_label[idx_ulb] = torch.where(select == 1, max_idx, self.selected_label[idx_ulb])\n",
    ),
]

COTEACHING = [
    (
        "selfsup.py",
        "        self.rate_schedule[:num_gradual] = np.linspace(0, forget_rate**exponent, num_gradual)\n",
        "        self.rate_schedule[:num_gradual] = np.linspace(0, forget_rate**exponent, num_gradual)\n"
        "        self.rate_schedule = self.rate_schedule.tolist()\n",
    ),
]

REWRITES.update({
    "dino_multicrop": DINO,
    "byol_lazy_target": BYOL,
    "flexmatch_thresholds": FLEXMATCH,
    "coteaching": COTEACHING,
})

# --------------------------------------------------------------------------- generative.py

ENCODEC = [
    (
        "generative.py",
        "        avg_probs = torch.bincount(codes[:, 0].flatten(), minlength=self.bins).float() / codes[:, 0].numel()\n",
        "        avg_probs = F.one_hot(codes[:, 0].flatten(), self.bins).sum(0).float() / codes[:, 0].numel()\n",
    ),
]

REWRITES.update({
    "encodec_rvq": ENCODEC,
    "maskgit_train": [MASKED_MEAN],
})

# --------------------------------------------------------------------------- points.py

POINTNET2 = [
    ("helpers.py", "        distance[mask] = dist[mask]\n", "        distance = torch.where(mask, dist, distance)\n"),
    ("helpers.py", "    group_idx[mask] = group_first[mask]\n", "    group_idx = torch.where(mask, group_first, group_idx)\n"),
]

VOXEL_SEG = [
    (
        "points.py",
        "    unique_keys, inverse = torch.unique(keys, return_inverse=True)\n    return unique_keys, inverse\n",
        """    sorted_keys, perm = torch.sort(keys)
    is_new = torch.ones_like(sorted_keys, dtype=torch.bool)
    is_new[1:] = sorted_keys[1:] != sorted_keys[:-1]
    inverse = torch.empty_like(perm).scatter_(0, perm, is_new.long().cumsum(0) - 1)
    return sorted_keys, inverse
""",
    ),
    (
        "points.py",
        "        voxel_feats = scatter_mean(self.point_mlp(feats), inverse)\n",
        "        voxel_feats = scatter_mean(self.point_mlp(feats), inverse, dim_size=coords.shape[0])  # at most one voxel a point\n",
    ),
]

KABSCH = [
    (
        "points.py",
        """    if torch.linalg.det(R) < 0:
        SS = torch.diag(torch.tensor([1.0, 1.0, -1.0], device=A.device))
        R = (Vt.T @ SS) @ U.T
""",
        """    d = torch.sign(torch.linalg.det(R))
    SS = torch.diag(torch.stack([torch.ones_like(d), torch.ones_like(d), d]))
    R = (Vt.T @ SS) @ U.T
""",
    ),
]

REWRITES.update({
    "pointnet2_ssg": POINTNET2,
    "voxel_seg": VOXEL_SEG,
    "kabsch_rmsd": KABSCH,
})

# --------------------------------------------------------------------------- rl.py

QMIX = [
    (
        "rl.py",
        """        max_ep_t = int(batch["filled"].sum(1).max())
        batch = {k: v[:, :max_ep_t] for k, v in batch.items()}
""",
        "        # steps past the longest episode are padding: filled = 0 there, so their mask is zero\n",
    ),
]

REWRITES.update({
    "r2d2_burnin": [MASKED_MEAN],
    "qmix_learner": QMIX,
})

# --------------------------------------------------------------------------- graphs.py

GIN_VN = [
    (
        "graphs.py",
        "        virtualnode_embedding = self.virtualnode_embedding(torch.zeros(batch[-1].item() + 1).to(edge_index.dtype).to(edge_index.device))\n",
        "        num_graphs = batched_data.num_graphs\n"
        "        virtualnode_embedding = self.virtualnode_embedding(torch.zeros(num_graphs).to(edge_index.dtype).to(edge_index.device))\n",
    ),
    (
        "graphs.py",
        "                virtualnode_embedding_temp = global_add_pool(h_list[layer], batch) + virtualnode_embedding\n",
        "                virtualnode_embedding_temp = global_add_pool(h_list[layer], batch, num_graphs) + virtualnode_embedding\n",
    ),
    (
        "graphs.py",
        "        h_graph = global_add_pool(h_list[-1], batch) / torch.bincount(batch).clamp(min=1)[:, None].float()\n",
        "        counts = scatter_sum(torch.ones_like(batch, dtype=torch.float), batch, dim=0, dim_size=num_graphs)\n"
        "        h_graph = global_add_pool(h_list[-1], batch, num_graphs) / counts.clamp(min=1)[:, None]\n",
    ),
    (
        "graphs.py",
        "        loss = F.binary_cross_entropy_with_logits(pred.float()[is_labeled], batched_data.y.float()[is_labeled])\n",
        """        weight = is_labeled.float()
        target = torch.where(is_labeled, batched_data.y.float(), torch.zeros_like(batched_data.y.float()))
        loss = (F.binary_cross_entropy_with_logits(pred.float(), target, reduction="none") * weight).sum() / weight.sum()
""",
    ),
]

REWRITES.update({"gin_virtualnode": GIN_VN})

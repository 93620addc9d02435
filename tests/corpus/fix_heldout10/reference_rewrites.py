"""Hand-written reference rewrites for the tenth held-out set: per program, exact-text replacements
``(file, old, new)`` applied to a copy of the package whose ``# BREAK`` comments were stripped. Applied
together they remove every fixable break of the program while keeping its outputs and its parameters'
gradients (``check.py`` verifies both against the original run in eager)."""

from __future__ import annotations

# --------------------------------------------------------------------------- nlp.py

DPO = [
    (
        "nlp.py",
        """        # the collator pads every sample to max_len: drop the columns that are padding in every row
        seq_len = int(att_masks.sum(dim=1).max())
        input_ids, att_masks = input_ids[:, :seq_len], att_masks[:, :seq_len]
""",
        """        # the collator pads every sample to max_len; right padding under a causal model changes no real position
""",
    ),
    (
        "nlp.py",
        """        for mask, source_len in zip(loss_masks, prompt_id_lens, strict=True):
            mask[:source_len] = False
""",
        """        positions = torch.arange(loss_masks.size(1), device=loss_masks.device)
        loss_masks = loss_masks & (positions[None, :] >= prompt_id_lens[:, None])
""",
    ),
]

GRPO = [
    (
        "nlp.py",
        "        eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]\n",
        "        eos_idx = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1), eos_idx)\n",
    ),
    (
        "nlp.py",
        "        completion_length = completion_mask.sum(1).float().mean().item()\n",
        "        completion_length = completion_mask.sum(1).float().mean().detach()\n",
    ),
    (
        "nlp.py",
        '        self._metrics["kl"].append(mean_kl.item())\n',
        '        self._metrics["kl"].append(mean_kl.detach())\n',
    ),
]

KTO = [
    (
        "nlp.py",
        """        chosen_idx = torch.nonzero(batch["label"], as_tuple=True)[0]
        rejected_idx = torch.nonzero(~batch["label"], as_tuple=True)[0]
        chosen_logps = completion_logps[chosen_idx, ...]
        rejected_logps = completion_logps[rejected_idx, ...]
        return chosen_logps, rejected_logps, KL_logps
""",
        """        # every example's log-prob; kto_loss weighs each by its desirable / undesirable label
        return completion_logps, completion_logps, KL_logps
""",
    ),
    (
        "nlp.py",
        """                 reference_rejected_logps, reference_KL_logps):
        kl = (policy_KL_logps - reference_KL_logps).mean().detach()
        kl = kl.clamp(min=0)

        if policy_chosen_logps.shape[0] != 0 or reference_chosen_logps.shape[0] != 0:
            chosen_logratios = policy_chosen_logps - reference_chosen_logps
            chosen_losses = 1 - F.sigmoid(self.beta * (chosen_logratios - kl))
            chosen_rewards = self.beta * chosen_logratios.detach()
        else:
            # lists can't be empty -- if they are, then accelerate.gather will hang
            chosen_losses = torch.Tensor([]).to(kl.device)
            chosen_rewards = torch.Tensor([]).to(kl.device)

        if policy_rejected_logps.shape[0] != 0 or reference_rejected_logps.shape[0] != 0:
            rejected_logratios = policy_rejected_logps - reference_rejected_logps
            rejected_losses = 1 - F.sigmoid(self.beta * (kl - rejected_logratios))
            rejected_rewards = self.beta * rejected_logratios.detach()
        else:
            rejected_losses = torch.Tensor([]).to(kl.device)
            rejected_rewards = torch.Tensor([]).to(kl.device)

        losses = torch.cat((self.desirable_weight * chosen_losses, self.undesirable_weight * rejected_losses), 0)
        return losses, chosen_rewards, rejected_rewards, kl
""",
        """                 reference_rejected_logps, reference_KL_logps, label):
        kl = (policy_KL_logps - reference_KL_logps).mean().detach()
        kl = kl.clamp(min=0)

        logratios = policy_chosen_logps - reference_chosen_logps
        chosen_losses = 1 - F.sigmoid(self.beta * (logratios - kl))
        rejected_losses = 1 - F.sigmoid(self.beta * (kl - logratios))
        losses = torch.where(label, self.desirable_weight * chosen_losses, self.undesirable_weight * rejected_losses)
        rewards = self.beta * logratios.detach()
        chosen_rewards = torch.where(label, rewards, 0.0)
        rejected_rewards = torch.where(label, 0.0, rewards)
        return losses, chosen_rewards, rejected_rewards, kl
""",
    ),
    (
        "nlp.py",
        """            reference_chosen_logps, reference_rejected_logps, reference_KL_logps,
        )
""",
        """            reference_chosen_logps, reference_rejected_logps, reference_KL_logps, batch["label"],
        )
""",
    ),
]

MEDUSA = [
    (
        "nlp.py",
        """    if accept_length == 0:
        # Default to the first candidate if none are accepted
        best_candidate = torch.tensor(0, dtype=torch.long, device=candidates.device)
    else:
        best_candidate = torch.argmax(candidates_accept_length).to(torch.long)
""",
        """    # Default to the first candidate if none are accepted
    best_candidate = torch.where(accept_length == 0, 0, torch.argmax(candidates_accept_length)).to(torch.long)
""",
    ),
]

SWITCH = [
    (
        "nlp.py",
        """        idx_mask = router_mask.reshape(batch_size * seq_len, num_experts).sum(dim=0)
        idx_mask = torch.nonzero(idx_mask, as_tuple=True)[0].tolist()
        for idx in idx_mask:
            next_states[router_mask[:, :, idx]] = getattr(self.experts, f"expert_{idx}")(
                hidden_states[router_mask[:, :, idx]]
            )
""",
        """        for idx in range(num_experts):
            expert_output = getattr(self.experts, f"expert_{idx}")(hidden_states)
            next_states = torch.where(router_mask[:, :, idx].unsqueeze(-1), expert_output, next_states)
""",
    ),
]

PAGED = [
    (
        "nlp.py",
        """    block_tables_lst = block_tables.cpu().tolist()
    seq_lens_lst = seq_lens.cpu().tolist()
    for i in range(num_seqs):
        q = query[i].unsqueeze(0)
        block_table = block_tables_lst[i]
        seq_len = int(seq_lens_lst[i])

        keys_lst = []
        values_lst = []
        for j in range(seq_len):
            block_number = int(block_table[j // block_size])
            block_offset = j % block_size
            keys_lst.append(key_cache[block_number, block_offset].reshape(num_kv_heads, head_size))
            values_lst.append(value_cache[block_number, block_offset].reshape(num_kv_heads, head_size))
        keys = torch.stack(keys_lst, dim=0)
        values = torch.stack(values_lst, dim=0)
        if num_queries_per_kv > 1:
            # Handle MQA and GQA
            keys = torch.repeat_interleave(keys, num_queries_per_kv, dim=1)
            values = torch.repeat_interleave(values, num_queries_per_kv, dim=1)
        out = ref_masked_attention(q, keys, values, scale)
        out = out.view(num_query_heads, head_size)
        output[i].copy_(out, non_blocking=True)
""",
        """    max_len = block_tables.shape[1] * block_size
    block_ids = block_tables.long()
    keys = key_cache[block_ids].reshape(num_seqs, max_len, num_kv_heads, head_size)
    values = value_cache[block_ids].reshape(num_seqs, max_len, num_kv_heads, head_size)
    if num_queries_per_kv > 1:
        # Handle MQA and GQA
        keys = torch.repeat_interleave(keys, num_queries_per_kv, dim=2)
        values = torch.repeat_interleave(values, num_queries_per_kv, dim=2)
    attn_weights = scale * torch.einsum("shd,skhd->shk", query, keys).float()
    positions = torch.arange(max_len, device=query.device)
    beyond = positions[None, :] >= seq_lens.long()[:, None]
    attn_weights = attn_weights.masked_fill(beyond[:, None, :], float("-inf"))
    attn_weights = torch.softmax(attn_weights, dim=-1).to(values.dtype)
    output.copy_(torch.einsum("shk,skhd->shd", attn_weights, values).view(num_seqs, num_query_heads, head_size))
""",
    ),
]

GRAD_ACCUM = [
    ("nlp.py", "        num_items_in_batch = num_items_in_batch.item()\n", ""),
]

# --------------------------------------------------------------------------- recsys.py

DCNV2 = [
    (
        "recsys.py",
        """        length_per_key = lengths.sum(dim=1).tolist()
        per_key = values.split(length_per_key)
        pooled = []
        for f, (_name, ebc) in enumerate(self.embedding_bags.items()):
            offsets = torch.cat([lengths.new_zeros(1), lengths[f].cumsum(0)[:-1]])
            pooled.append(ebc(per_key[f], offsets))
        return torch.cat(pooled, dim=1)
""",
        """        num_features, batch_size = lengths.shape
        # each value's bag as the flat index f * batch + b, from where the running lengths end
        bag_ends = lengths.flatten().cumsum(0)
        bag_of_value = torch.searchsorted(bag_ends, torch.arange(values.numel(), device=values.device), right=True)
        feature_of_value = (bag_of_value // batch_size).unsqueeze(-1)
        pooled = []
        for f, (_name, ebc) in enumerate(self.embedding_bags.items()):
            emb = ebc.weight[values.clamp(max=ebc.num_embeddings - 1)]
            emb = torch.where(feature_of_value == f, emb, 0.0)
            bags = emb.new_zeros(num_features * batch_size, emb.size(1)).index_add(0, bag_of_value, emb)
            pooled.append(bags[f * batch_size : (f + 1) * batch_size])
        return torch.cat(pooled, dim=1)
""",
    ),
]

TWO_TOWER = [
    (
        "recsys.py",
        """        t = int(self.step)
        h = item_ids % self.num_buckets
        self.B[h] = (1 - self.alpha) * self.B[h] + self.alpha * (t - self.A[h])
        self.A[h] = float(t)
""",
        """        t = self.step
        h = item_ids % self.num_buckets
        self.B[h] = (1 - self.alpha) * self.B[h] + self.alpha * (t - self.A[h])
        self.A[h] = t.to(self.A.dtype)
""",
    ),
    (
        "recsys.py",
        """        unique_items, inverse = torch.unique(item_ids, return_inverse=True)
        candidates = self.candidate_tower(unique_items, self.item_features[unique_items])[inverse]
""",
        """        candidates = self.candidate_tower(item_ids, self.item_features[item_ids])
""",
    ),
]

LIGHTGCN = [
    (
        "recsys.py",
        """        exclude_index, exclude_slot = (train_pos >= 0).nonzero(as_tuple=True)
        rating[exclude_index, train_pos[exclude_index, exclude_slot]] = -(1 << 10)
""",
        """        # the padding slots (-1) scatter into a spare column, dropped again
        spare = rating.size(1)
        rating = torch.cat([rating, rating.new_zeros(rating.size(0), 1)], dim=1)
        rating = rating.scatter(1, torch.where(train_pos >= 0, train_pos, spare), -(1 << 10))[:, :spare]
""",
    ),
    (
        "recsys.py",
        """            test_matrix = torch.zeros(len(users), k)
            for i, n in enumerate(n_test):
                test_matrix[i, : min(k, n)] = 1
""",
        """            test_matrix = (torch.arange(k)[None, :] < n_test[:, None]).float()
""",
    ),
]

# --------------------------------------------------------------------------- detection.py

YOLO_ASSIGNER = [
    (
        "detection.py",
        """        bbox_scores[mask_gt] = pd_scores[ind[0], :, ind[1]][mask_gt]

        # (b, max_num_obj, 1, 4), (b, 1, h*w, 4)
        pd_boxes = pd_bboxes.unsqueeze(1).expand(-1, self.n_max_boxes, -1, -1)[mask_gt]
        gt_boxes = gt_bboxes.unsqueeze(2).expand(-1, -1, na, -1)[mask_gt]
        overlaps[mask_gt] = self.iou_calculation(gt_boxes, pd_boxes)
""",
        """        bbox_scores = torch.where(mask_gt, pd_scores[ind[0], :, ind[1]], bbox_scores)

        # (b, max_num_obj, h*w, 4) both
        pd_boxes = pd_bboxes.unsqueeze(1).expand(-1, self.n_max_boxes, -1, -1)
        gt_boxes = gt_bboxes.unsqueeze(2).expand(-1, -1, na, -1)
        overlaps = torch.where(mask_gt, self.iou_calculation(gt_boxes, pd_boxes), overlaps)
""",
    ),
    (
        "detection.py",
        """        if fg_mask.max() > 1:
            mask_multi_gts = (fg_mask.unsqueeze(1) > 1).expand(-1, n_max_boxes, -1)  # (b, n_max_boxes, h*w)
            max_overlaps_idx = overlaps.argmax(1)  # (b, h*w)
            is_max_overlaps = torch.zeros(mask_pos.shape, dtype=mask_pos.dtype, device=mask_pos.device)
            is_max_overlaps.scatter_(1, max_overlaps_idx.unsqueeze(1), 1)
            mask_pos = torch.where(mask_multi_gts, is_max_overlaps, mask_pos).float()  # (b, n_max_boxes, h*w)
            fg_mask = mask_pos.sum(-2)
""",
        """        # an anchor assigned to several gts keeps the one it overlaps most (a no-op elsewhere)
        mask_multi_gts = (fg_mask.unsqueeze(1) > 1).expand(-1, n_max_boxes, -1)  # (b, n_max_boxes, h*w)
        max_overlaps_idx = overlaps.argmax(1)  # (b, h*w)
        is_max_overlaps = torch.zeros(mask_pos.shape, dtype=mask_pos.dtype, device=mask_pos.device)
        is_max_overlaps.scatter_(1, max_overlaps_idx.unsqueeze(1), 1)
        mask_pos = torch.where(mask_multi_gts, is_max_overlaps, mask_pos).float()  # (b, n_max_boxes, h*w)
        fg_mask = mask_pos.sum(-2)
""",
    ),
]

YOLO_LOSS = [
    (
        "detection.py",
        """        weight = target_scores.sum(-1)[fg_mask].unsqueeze(-1)
        iou = bbox_iou(pred_bboxes[fg_mask], target_bboxes[fg_mask], CIoU=True)
""",
        """        weight = (target_scores.sum(-1) * fg_mask).unsqueeze(-1)
        iou = bbox_iou(pred_bboxes, target_bboxes, CIoU=True)
""",
    ),
    (
        "detection.py",
        """            loss_dfl = self.dfl_loss(pred_dist[fg_mask].view(-1, self.dfl_loss.reg_max), target_ltrb[fg_mask]) * weight
""",
        """            loss_dfl = self.dfl_loss(pred_dist.view(-1, self.dfl_loss.reg_max), target_ltrb.view(-1, 4))
            loss_dfl = loss_dfl.view(*fg_mask.shape, 1) * weight
""",
    ),
    (
        "detection.py",
        """        if fg_mask.sum():
            target_bboxes /= stride_tensor
            loss[0], loss[2] = self.bbox_loss(
                pred_distri, pred_bboxes, anchor_points, target_bboxes, target_scores, target_scores_sum, fg_mask
            )
""",
        """        # without foreground every fg-weighted term is zero, as the skipped branch left them
        target_bboxes /= stride_tensor
        loss[0], loss[2] = self.bbox_loss(
            pred_distri, pred_bboxes, anchor_points, target_bboxes, target_scores, target_scores_sum, fg_mask
        )
""",
    ),
]

MASK2FORMER = [
    (
        "detection.py",
        "        num_masks = torch.clamp(num_masks / get_world_size(), min=1).item()\n",
        "        num_masks = torch.clamp(num_masks / get_world_size(), min=1)[0]\n",
    ),
]

BYTETRACK = [
    (
        "detection.py",
        """    cost = cost_matrix.tolist()
    pairs = sorted((c, i, j) for i, row in enumerate(cost) for j, c in enumerate(row) if c <= thresh)
    used_rows, used_cols, matches = set(), set(), []
    for _, i, j in pairs:
        if i in used_rows or j in used_cols:
            continue
        used_rows.add(i)
        used_cols.add(j)
        matches.append((i, j))
    return matches
""",
        """    # the lowest remaining cost first (ties to the lowest row, then column), as sorting the pairs does
    cost = cost_matrix.clone()
    num_rows, num_cols = cost.shape
    match = torch.full((num_rows,), -1, dtype=torch.long)
    rows, cols = torch.arange(num_rows), torch.arange(num_cols)
    for _ in range(min(num_rows, num_cols)):
        flat = cost.argmin()
        ok = cost.min() <= thresh
        row, col = rows == flat // num_cols, cols == flat % num_cols
        match = torch.where(row & ok, flat % num_cols, match)
        cost = cost.masked_fill((row[:, None] | col[None, :]) & ok, float("inf"))
    return match
""",
    ),
    (
        "detection.py",
        """        dets = output_results[remain_inds]
        dets_second = output_results[inds_second]
""",
        """        dets = output_results
        dets_second = output_results
""",
    ),
    (
        "detection.py",
        """        dists = 1 - box_iou(predicted, dets[:, :4]) * dets[None, :, 4]  # fuse_score
        matches = linear_assignment(dists, thresh=self.match_thresh)
        track_matched = torch.zeros(num_tracks, dtype=torch.bool)
        det_matched = torch.zeros(len(dets), dtype=torch.bool)
        new_boxes = predicted.clone()
        for itracked, idet in matches:
            new_boxes[itracked] = dets[idet, :4]
            track_matched[itracked] = True
            det_matched[idet] = True
""",
        """        dists = 1 - box_iou(predicted, dets[:, :4]) * dets[None, :, 4]  # fuse_score
        dists = dists.masked_fill(~remain_inds[None, :], float("inf"))
        match = linear_assignment(dists, thresh=self.match_thresh)
        track_matched = match >= 0
        det_matched = torch.zeros(len(dets), dtype=torch.long).scatter_add(0, match.clamp(min=0), track_matched.long()) > 0
        new_boxes = torch.where(track_matched[:, None], dets[match.clamp(min=0), :4], predicted)
""",
    ),
    (
        "detection.py",
        """        dists = 1 - box_iou(predicted, dets_second[:, :4])
        dists[track_matched] = 2.0
        matches_second = linear_assignment(dists, thresh=self.second_match_thresh)
        for itracked, idet in matches_second:
            new_boxes[itracked] = dets_second[idet, :4]
            track_matched[itracked] = True
""",
        """        dists = 1 - box_iou(predicted, dets_second[:, :4])
        dists = dists.masked_fill(~inds_second[None, :], float("inf"))
        dists[track_matched] = 2.0
        match_second = linear_assignment(dists, thresh=self.second_match_thresh)
        new_boxes = torch.where((match_second >= 0)[:, None], dets_second[match_second.clamp(min=0), :4], new_boxes)
        track_matched = track_matched | (match_second >= 0)
""",
    ),
]

POINTPILLARS = [
    (
        "detection.py",
        """    def forward(self, features, coors):
        \"\"\"features: [N, 4] points; coors: [N, 4] (batch, z, y, x) pillar coordinates of each point.\"\"\"
        voxel_coors, inverse = torch.unique(coors, dim=0, return_inverse=True)
        num_voxels = voxel_coors.shape[0]
""",
        """    def forward(self, features, coors, inverse, num_voxels):
        \"\"\"features: [N, 4] points; coors: [N, 4] (batch, z, y, x); inverse: each point's cell of the BEV canvas.\"\"\"
""",
    ),
    (
        "detection.py",
        "        voxel_mean = features.new_zeros(num_voxels, 3).index_add_(0, inverse, features[:, :3]) / counts[:, None]\n",
        "        voxel_mean = features.new_zeros(num_voxels, 3).index_add_(0, inverse, features[:, :3]) / counts.clamp(min=1)[:, None]\n",
    ),
    ("detection.py", "        return voxel_feats, voxel_coors\n", "        return voxel_feats\n"),
    (
        "detection.py",
        """        points, coors = points[keep], coors[keep]
        voxel_features, feature_coors = self.voxel_encoder(points, coors)
        x = self.middle_encoder(voxel_features, feature_coors, batch_size)
""",
        """        ny, nx = self.middle_encoder.ny, self.middle_encoder.nx
        # every cell of the (batch, y, x) canvas is a pillar; points out of range go to a spare cell past it
        cell = torch.where(keep, (coors[:, 0] * ny + coors[:, 2]) * nx + coors[:, 3], batch_size * ny * nx)
        voxel_features = self.voxel_encoder(points, coors, cell, batch_size * ny * nx + 1)
        x = voxel_features[:-1].view(batch_size, ny, nx, -1).permute(0, 3, 1, 2)
""",
    ),
]

# --------------------------------------------------------------------------- vision.py

VIDEOMAE = [
    (
        "vision.py",
        "        self.pos_embed = get_sinusoid_encoding_table(self.patch_embed.num_patches, embed_dim)\n",
        """        self.pos_embed = get_sinusoid_encoding_table(self.patch_embed.num_patches, embed_dim)
        # tube masking hides the same share of tubelets in every clip (mask_ratio 0.75)
        self.num_visible = self.patch_embed.num_patches - int(0.75 * self.patch_embed.num_patches)
""",
    ),
    (
        "vision.py",
        "        x_vis = x[~mask].reshape(B, -1, C)\n",
        """        ids_keep = torch.argsort(mask.int(), dim=1, stable=True)[:, : self.num_visible]
        x_vis = torch.gather(x, 1, ids_keep.unsqueeze(-1).expand(-1, -1, C))
""",
    ),
    (
        "vision.py",
        """        pos_emd_vis = expand_pos_embed[~mask].reshape(B, -1, C)
        pos_emd_mask = expand_pos_embed[mask].reshape(B, -1, C)
""",
        """        ids = torch.argsort(mask.int(), dim=1, stable=True).unsqueeze(-1).expand(-1, -1, C)
        pos_emd_vis = torch.gather(expand_pos_embed, 1, ids[:, :N])
        pos_emd_mask = torch.gather(expand_pos_embed, 1, ids[:, N:])
""",
    ),
    (
        "vision.py",
        "            labels = videos_patch[bool_masked_pos].reshape(B, -1, C)\n",
        """            ids_masked = torch.argsort(bool_masked_pos.int(), dim=1, stable=True)[:, self.model.encoder.num_visible :]
            labels = torch.gather(videos_patch, 1, ids_masked.unsqueeze(-1).expand(-1, -1, C))
""",
    ),
]

NNUNET = [
    (
        "vision.py",
        """        ce_loss = (
            self.ce(net_output, target[:, 0])
            if self.weight_ce != 0 and (self.ignore_label is None or num_fg > 0)
            else 0
        )
""",
        """        if self.weight_ce == 0:
            ce_loss = 0
        elif self.ignore_label is None:
            ce_loss = self.ce(net_output, target[:, 0])
        else:
            ce_loss = torch.where(num_fg > 0, self.ce(net_output, target[:, 0]), 0.0)
""",
    ),
]

# --------------------------------------------------------------------------- audio.py

HUBERT = [
    (
        "audio.py",
        """        if neg_is_pos.any():
            logits[1:][neg_is_pos] = float("-inf")
""",
        """        logits = torch.cat([logits[:1], logits[1:].masked_fill(neg_is_pos, float("-inf"))], dim=0)
""",
    ),
    (
        "audio.py",
        """            proj_x_m = self.final_proj(x[masked_indices])
            proj_x_m_list = [proj_x_m for _ in range(len(target_list))]
            logit_m_list = [
                compute_pred(proj_x_m, t[masked_indices], label_embs_list[i])
""",
        """            # every frame's logits; the criterion weighs the masked ones
            proj_x_m = self.final_proj(x.flatten(0, 1))
            proj_x_m_list = [proj_x_m for _ in range(len(target_list))]
            logit_m_list = [
                compute_pred(proj_x_m, t.flatten(), label_embs_list[i])
""",
    ),
    (
        "audio.py",
        """        return {"logit_m_list": logit_m_list, "padding_mask": padding_mask}
""",
        """        return {"logit_m_list": logit_m_list, "padding_mask": padding_mask, "masked_indices": masked_indices.flatten()}
""",
    ),
    (
        "audio.py",
        """        for logp_m, targ_m in zip(logp_m_list, targ_m_list, strict=True):
            loss_m = F.cross_entropy(logp_m, targ_m, reduction="sum")
            loss_m_list.append(loss_m)
        if self.pred_masked_weight > 0:
            loss += self.pred_masked_weight * sum(loss_m_list)
            sample_size += targ_m_list[0].numel()
""",
        """        frame_weight = net_output["masked_indices"].float()
        for logp_m, targ_m in zip(logp_m_list, targ_m_list, strict=True):
            loss_m = (F.cross_entropy(logp_m, targ_m, reduction="none") * frame_weight).sum()
            loss_m_list.append(loss_m)
        if self.pred_masked_weight > 0:
            loss += self.pred_masked_weight * sum(loss_m_list)
            sample_size = sample_size + frame_weight.sum()
""",
    ),
]

HIFIGAN = [
    (
        "audio.py",
        """        r_losses.append(r_loss.item())
        g_losses.append(g_loss.item())
""",
        """        r_losses.append(r_loss.detach())
        g_losses.append(g_loss.detach())
""",
    ),
]

VITS = [
    (
        "audio.py",
        """@torch.no_grad()
def maximum_path(neg_cent, mask):
    \"\"\"neg_cent: [b, t_t, t_s]; mask: [b, t_t, t_s]\"\"\"
    neg_cent = neg_cent.clone()
    path = torch.zeros_like(neg_cent)
    t_t_max = mask.sum(1)[:, 0].long()
    t_s_max = mask.sum(2)[:, 0].long()
    for i in range(neg_cent.size(0)):
        maximum_path_each(path[i], neg_cent[i], int(t_t_max[i]), int(t_s_max[i]))
    return path
""",
        """@torch.no_grad()
def maximum_path(neg_cent, mask, max_neg_val=-1e9):
    \"\"\"neg_cent: [b, t_t, t_s]; mask: [b, t_t, t_s]. The whole batch frame by frame: the best score of each
    (frame, token) cell and whether it stays on the token or advances from the previous one.\"\"\"
    b, t_t, t_s = neg_cent.shape
    t_s_max = mask.sum(2)[:, 0].long()
    direction = torch.ones(b, t_t, t_s, dtype=torch.long)
    v = torch.zeros(b, t_s, dtype=neg_cent.dtype)
    x_range = torch.arange(t_s)
    for y in range(t_t):
        v_prev = F.pad(v, [1, 0], value=max_neg_val)[:, :-1]  # advance from token x - 1
        stay = v >= v_prev
        direction[:, y, :] = stay.long()
        v = torch.where(x_range <= y, torch.where(stay, v, v_prev) + neg_cent[:, y, :], max_neg_val)
    # frames past a sample's end keep the last token, so the walk back starts on it
    direction = torch.where(mask.bool(), direction, 1)
    path = torch.zeros_like(neg_cent)
    index = t_s_max - 1
    batch = torch.arange(b)
    for y in range(t_t - 1, -1, -1):
        path[batch, y, index] = 1
        index = index + direction[batch, y, index] - 1
    return path * mask
""",
    ),
    (
        "helpers.py",
        """    ret = torch.zeros_like(x[:, :, :segment_size])
    for i in range(x.size(0)):
        idx_str = ids_str[i]
        idx_end = idx_str + segment_size
        ret[i] = x[i, :, idx_str:idx_end]
    return ret
""",
        """    idx = ids_str[:, None] + torch.arange(segment_size, device=x.device)[None, :]
    return torch.gather(x, 2, idx[:, None, :].expand(-1, x.size(1), -1))
""",
    ),
]

# --------------------------------------------------------------------------- rl.py

MUZERO = [
    (
        "rl.py",
        "    scale_encoded_state[scale_encoded_state < 1e-5] += 1e-5\n",
        "    scale_encoded_state = torch.where(scale_encoded_state < 1e-5, scale_encoded_state + 1e-5, scale_encoded_state)\n",
    ),
    (
        "rl.py",
        """            last_step_value = (
                root_values[bootstrap_index]
                if game_history.to_play_history[bootstrap_index] == game_history.to_play_history[index]
                else -root_values[bootstrap_index]
            )
""",
        """            last_step_value = torch.where(
                game_history.to_play_history[bootstrap_index] == game_history.to_play_history[index],
                root_values[bootstrap_index],
                -root_values[bootstrap_index],
            )
""",
    ),
    (
        "rl.py",
        """            value += (
                reward
                if game_history.to_play_history[index] == game_history.to_play_history[index + i]
                else -reward
            ) * self.discount**i
""",
        """            value += torch.where(
                game_history.to_play_history[index] == game_history.to_play_history[index + i], reward, -reward
            ) * self.discount**i
""",
    ),
]

# --------------------------------------------------------------------------- science.py

EDM = [
    (
        "helpers.py",
        """    masked_max_abs_value = (x * (1 - node_mask)).abs().sum().item()
    assert masked_max_abs_value < 1e-5, f"Error {masked_max_abs_value} too high"
""",
        """    masked_max_abs_value = (x * (1 - node_mask)).abs().sum()
    assert masked_max_abs_value < 1e-5, "Error: masked values too high"
""",
    ),
    (
        "helpers.py",
        """    assert (variable * (1 - node_mask)).abs().max().item() < 1e-4, "Variables not masked properly."
""",
        """    assert (variable * (1 - node_mask)).abs().max() < 1e-4, "Variables not masked properly."
""",
    ),
    (
        "science.py",
        """        if torch.any(torch.isnan(vel)):
            print("Warning: detected nan, resetting EGNN output to zero.")
            vel = torch.zeros_like(vel)
""",
        """        # reset NaN velocities to zero
        vel = torch.where(torch.any(torch.isnan(vel)), torch.zeros_like(vel), vel)
""",
    ),
]

ESM = [
    (
        "science.py",
        """        if not padding_mask.any():
            padding_mask = None
""",
        "",
    ),
]

NEURAL_ODE = [
    (
        "science.py",
        """    if d0 < 1e-5 or d1 < 1e-5:
        h0 = torch.tensor(1e-6, dtype=y0.dtype, device=y0.device)
    else:
        h0 = 0.01 * d0 / d1
""",
        """    h0 = torch.where((d0 < 1e-5) | (d1 < 1e-5), torch.tensor(1e-6, dtype=y0.dtype, device=y0.device), 0.01 * d0 / d1)
""",
    ),
    (
        "science.py",
        """        if error_ratio <= 1:
            t0, y, f0 = t0 + dt, y1, f1
        factor = torch.clamp(safety * error_ratio ** (-1.0 / 3), dfactor, ifactor) if error_ratio > 0 else ifactor
""",
        """        accept = error_ratio <= 1
        t0 = torch.where(accept, t0 + dt, t0)
        y = torch.where(accept, y1, y)
        f0 = torch.where(accept, f1, f0)
        factor = torch.where(error_ratio > 0, torch.clamp(safety * error_ratio ** (-1.0 / 3), dfactor, ifactor), ifactor)
""",
    ),
]

# --------------------------------------------------------------------------- graph.py

GRAPHCAST = [
    (
        "graph.py",
        "        agg = scatter_sum(e, receivers)\n",
        "        agg = scatter_sum(e, receivers, dim_size=receiver_feats.size(0))\n",
    ),
    (
        "graph.py",
        """    if torch.isclose(lat.abs(), torch.tensor(90.0)).any():
        # the first and last latitude bands are the polar caps
        weights = torch.cos(torch.deg2rad(lat)) * torch.sin(torch.deg2rad(delta / 2))
        weights[[0, -1]] = torch.sin(torch.deg2rad(delta / 4)) ** 2
    else:
        weights = torch.cos(torch.deg2rad(lat))
""",
        """    has_poles = torch.isclose(lat.abs(), torch.tensor(90.0)).any()
    # with poles, the first and last latitude bands are the polar caps
    with_poles = torch.cos(torch.deg2rad(lat)) * torch.sin(torch.deg2rad(delta / 2))
    with_poles[[0, -1]] = torch.sin(torch.deg2rad(delta / 4)) ** 2
    weights = torch.where(has_poles, with_poles, torch.cos(torch.deg2rad(lat)))
""",
    ),
    (
        "graph.py",
        "    return err[valid].mean()\n",
        "    return (err * valid).sum() / valid.sum()\n",
    ),
]

DIFFPOOL = [
    (
        "graph.py",
        """def dense_diff_pool(x, adj, s, mask=None, normalize=True):""",
        """def dense_diff_pool(x, adj, s, mask=None, normalize=True, num_nodes_max=None):""",
    ),
    (
        "graph.py",
        """    if normalize is True:
        link_loss = link_loss / adj.numel()
    ent_loss = (-s * torch.log(s + EPS)).sum(dim=-1).mean()
""",
        """    # a batch padded past its largest graph is normalised as if padded to it
    n = num_nodes if num_nodes_max is None else num_nodes_max
    if normalize is True:
        link_loss = link_loss / (batch_size * n * n)
    ent_loss = (-s * torch.log(s + EPS)).sum(dim=-1).sum() / (batch_size * n)
""",
    ),
    (
        "graph.py",
        """    def __init__(self, num_features=4, num_classes=3, hidden=16, clusters=(4, 2)):
        super().__init__()
""",
        """    def __init__(self, num_features=4, num_classes=3, hidden=16, clusters=(4, 2), max_nodes=8):
        super().__init__()
        self.max_nodes = max_nodes  # the dataset's node cap (T.ToDense(max_nodes) in PyG's example)
""",
    ),
    (
        "graph.py",
        """        x, mask = to_dense_batch(x, batch)
        adj = to_dense_adj(edge_index, batch)
        s = self.gnn1_pool(x, adj, mask)
        x = self.gnn1_embed(x, adj, mask)
        x, adj, l1, e1 = dense_diff_pool(x, adj, s, mask)
""",
        """        num_graphs = y.size(0)
        x, mask = to_dense_batch(x, batch, max_num_nodes=self.max_nodes, batch_size=num_graphs)
        adj = to_dense_adj(edge_index, batch, max_num_nodes=self.max_nodes, batch_size=num_graphs)
        s = self.gnn1_pool(x, adj, mask)
        x = self.gnn1_embed(x, adj, mask)
        x, adj, l1, e1 = dense_diff_pool(x, adj, s, mask, num_nodes_max=mask.sum(1).max())
""",
    ),
]

REWRITES: dict[str, list[tuple[str, str, str]]] = {
    "dpo_step": DPO,
    "grpo_loss": GRPO,
    "kto_loss": KTO,
    "medusa_step": MEDUSA,
    "switch_capacity": SWITCH,
    "paged_attention": PAGED,
    "grad_accum": GRAD_ACCUM,
    "dcnv2_jagged": DCNV2,
    "two_tower_logq": TWO_TOWER,
    "lightgcn_eval": LIGHTGCN,
    "yolov8_assigner": YOLO_ASSIGNER,
    "yolov8_loss": YOLO_LOSS,
    "mask2former_points": MASK2FORMER,
    "bytetrack_assoc": BYTETRACK,
    "pointpillars_dynamic": POINTPILLARS,
    "videomae_tube": VIDEOMAE,
    "nnunet_deep_supervision": NNUNET,
    "hubert_masked": HUBERT,
    "hifigan_losses": HIFIGAN,
    "vits_mas": VITS,
    "muzero_targets": MUZERO,
    "edm_egnn": EDM,
    "esm_contact": ESM,
    "neural_ode": NEURAL_ODE,
    "graphcast_step": GRAPHCAST,
    "diffpool": DIFFPOOL,
}

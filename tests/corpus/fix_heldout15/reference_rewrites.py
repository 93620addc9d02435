"""Hand-written reference rewrites for the fifteenth held-out set: per program, exact-text replacements
``(file, old, new)`` applied to a copy of the package whose ``# BREAK`` comments were stripped. Applied
together they remove every fixable break of the program while keeping its outputs and its parameters'
gradients (``check.py`` verifies both against the original run in eager)."""

from __future__ import annotations

REWRITES: dict[str, list[tuple[str, str, str]]] = {}

# --------------------------------------------------------------------------- helpers.py (HRNet's PCK accuracy)

PCK_VECTORIZED = [
    (
        "helpers.py",
        """    dists = np.zeros((preds.shape[1], preds.shape[0]))
    for n in range(preds.shape[0]):
        for c in range(preds.shape[1]):
            if target[n, c, 0] > 1 and target[n, c, 1] > 1:
                normed_preds = preds[n, c, :] / normalize[n]
                normed_targets = target[n, c, :] / normalize[n]
                dists[c, n] = np.linalg.norm(normed_preds - normed_targets)
            else:
                dists[c, n] = -1
    return dists
""",
        """    # every (n, c) at once: the distance where the target joint lies inside, -1 elsewhere; laid out (c, n)
    scored = (target[:, :, 0] > 1) & (target[:, :, 1] > 1)
    normed_preds = preds / normalize[:, None, :]
    normed_targets = target / normalize[:, None, :]
    dists = np.where(scored, np.linalg.norm(normed_preds - normed_targets, axis=-1), -1)
    return dists.T
""",
    ),
    (
        "helpers.py",
        """    num_dist_cal = dist_cal.sum()
    if num_dist_cal > 0:
        return np.less(dists[dist_cal], thr).sum() * 1.0 / num_dist_cal
    else:
        return -1
""",
        """    num_dist_cal = dist_cal.sum()
    below = (np.less(dists, thr) & dist_cal).sum()
    return np.where(num_dist_cal > 0, below * 1.0 / np.maximum(num_dist_cal, 1), -1)
""",
    ),
    (
        "helpers.py",
        """    for i in range(len(idx)):
        acc[i + 1] = dist_acc(dists[idx[i]])
        if acc[i + 1] >= 0:
            avg_acc = avg_acc + acc[i + 1]
            cnt += 1

    avg_acc = avg_acc / cnt if cnt != 0 else 0
    if cnt != 0:
        acc[0] = avg_acc
""",
        """    for i in range(len(idx)):
        acc[i + 1] = dist_acc(dists[idx[i]])
    # the joints with a score: their count and mean, 0 when there is none
    scored = acc[1:] >= 0
    cnt = cnt + scored.sum()
    avg_acc = np.where(cnt != 0, (acc[1:] * scored).sum() / np.maximum(cnt, 1), avg_acc)
    acc[0] = np.where(cnt != 0, avg_acc, acc[0])
""",
    ),
]

REWRITES.update({"hrnet_pose_train": PCK_VECTORIZED})

# --------------------------------------------------------------------------- pose.py

MMPOSE = [
    (
        "pose.py",
        """        for n in range(N):
            for k in range(K):
                heatmap = heatmaps[n][k]
                px = int(preds[n][k][0])
                py = int(preds[n][k][1])
                if 1 < px < W - 1 and 1 < py < H - 1:
                    diff = np.array([heatmap[py][px + 1] - heatmap[py][px - 1], heatmap[py + 1][px] - heatmap[py - 1][px]])
                    preds[n][k] += np.sign(diff) * 0.25
                    if post_process == "megvii":
                        preds[n][k] += 0.5
""",
        """        # every (n, k) at once: the arg-max cell, whether it is interior, its neighbours by take_along_axis
        px = preds[:, :, 0].astype(np.int64)
        py = preds[:, :, 1].astype(np.int64)
        inside = (1 < px) & (px < W - 1) & (1 < py) & (py < H - 1)
        pxc, pyc = np.clip(px, 1, W - 2), np.clip(py, 1, H - 2)
        flat = heatmaps.reshape(N, K, H * W)

        def at(y, x):
            return np.take_along_axis(flat, (y * W + x)[:, :, None], axis=2)[:, :, 0]

        diff = np.stack([at(pyc, pxc + 1) - at(pyc, pxc - 1), at(pyc + 1, pxc) - at(pyc - 1, pxc)], axis=-1)
        shift = np.sign(diff) * 0.25
        if post_process == "megvii":
            shift = shift + 0.5
        preds += shift * inside[:, :, None]
""",
    ),
]

REWRITES.update({"mmpose_topdown_test": MMPOSE})

# --------------------------------------------------------------------------- detection.py

ATSS = [
    (
        "detection.py",
        """        index = candidate_idxs.view(-1)[is_pos.view(-1)]
        overlaps_inf[index] = overlaps.t().contiguous().view(-1)[index]
""",
        """        # the candidates are distinct flat (gt, anchor) positions: mark the positive ones on a flat mask
        pos_flat = torch.zeros_like(overlaps_inf, dtype=torch.bool).scatter(0, candidate_idxs.view(-1), is_pos.view(-1))
        overlaps_inf = torch.where(pos_flat, overlaps.t().contiguous().view(-1), overlaps_inf)
""",
    ),
    (
        "detection.py",
        "        assigned_gt_inds[max_overlaps != -INF] = argmax_overlaps[max_overlaps != -INF] + 1\n",
        "        assigned_gt_inds = torch.where(max_overlaps != -INF, argmax_overlaps + 1, assigned_gt_inds)\n",
    ),
    (
        "detection.py",
        """            pos_inds = torch.nonzero(assigned_gt_inds > 0, as_tuple=False).squeeze()
            if pos_inds.numel() > 0:
                assigned_labels[pos_inds] = gt_labels[assigned_gt_inds[pos_inds] - 1]
""",
        """            pos_labels = gt_labels[(assigned_gt_inds - 1).clamp(min=0)]
            assigned_labels = torch.where(assigned_gt_inds > 0, pos_labels, assigned_labels)
""",
    ),
]

RPN = [
    (
        "detection.py",
        "        gt_pred_pairs_of_highest_quality = torch.nonzero(match_quality_matrix == highest_quality_foreach_gt[:, None])\n",
        "        pred_has_highest_quality = (match_quality_matrix == highest_quality_foreach_gt[:, None]).any(dim=0)\n",
    ),
    (
        "detection.py",
        """        pred_inds_to_update = gt_pred_pairs_of_highest_quality[:, 1]
        match_labels[pred_inds_to_update] = 1
""",
        """        match_labels[pred_has_highest_quality] = 1
""",
    ),
    (
        "detection.py",
        """        objectness_loss = F.binary_cross_entropy_with_logits(torch.cat(pred_objectness_logits, dim=1)[valid_mask], gt_labels[valid_mask].to(torch.float32), reduction="sum")
""",
        """        # every anchor, the ignored ones weighted 0
        objectness_loss = F.binary_cross_entropy_with_logits(torch.cat(pred_objectness_logits, dim=1), gt_labels.clamp(min=0).to(torch.float32),
                                                             weight=valid_mask.to(torch.float32), reduction="sum")
""",
    ),
]

ROI_HEADS = [
    (
        "detection.py",
        """        assert (src_widths > 0).all().item(), "Input boxes to Box2BoxTransform are not valid!"
""",
        """        assert (src_widths > 0).all(), "Input boxes to Box2BoxTransform are not valid!"
""",
    ),
    (
        "detection.py",
        """        fg_inds = torch.nonzero((gt_classes >= 0) & (gt_classes < self.num_classes), as_tuple=True)[0]
        if pred_deltas.shape[1] == box_dim:  # cls-agnostic regression
            fg_pred_deltas = pred_deltas[fg_inds]
        else:
            fg_pred_deltas = pred_deltas.view(-1, self.num_classes, box_dim)[fg_inds, gt_classes[fg_inds]]

        loss_box_reg = _dense_box_regression_loss([proposal_boxes[fg_inds]], self.box2box_transform,
                                                  [fg_pred_deltas.unsqueeze(0)], [gt_boxes[fg_inds]], ...,
                                                  "smooth_l1", self.smooth_l1_beta)
""",
        """        # every proposal, the background and ignored ones weighted 0 (their class clamped into range)
        fg_mask = (gt_classes >= 0) & (gt_classes < self.num_classes)
        if pred_deltas.shape[1] == box_dim:  # cls-agnostic regression
            all_pred_deltas = pred_deltas
        else:
            cls = gt_classes.clamp(0, self.num_classes - 1)
            all_pred_deltas = pred_deltas.view(-1, self.num_classes, box_dim)[torch.arange(cls.shape[0]), cls]
        gt_pred_deltas = self.box2box_transform.get_deltas(proposal_boxes, gt_boxes)
        loss_box_reg = (smooth_l1_loss(all_pred_deltas, gt_pred_deltas, self.smooth_l1_beta) * fg_mask[:, None]).sum()
""",
    ),
]

REWRITES.update({"atss_assign": ATSS, "detectron2_rpn": RPN, "detectron2_roi_heads": ROI_HEADS})

# --------------------------------------------------------------------------- speech.py (+ ESPnet's helpers)

WAV2VEC2 = [
    (
        "speech.py",
        "                tszs = buffered_arange(num).unsqueeze(-1).expand(-1, self.n_negatives).flatten()\n",
        # buffered_arange grows a buffer kept on the function on its first calls: a cold start breaks there too
        "                tszs = torch.arange(num).unsqueeze(-1).expand(-1, self.n_negatives).flatten()\n",
    ),
    (
        "speech.py",
        "                neg_idxs[neg_idxs >= tszs] += 1\n",
        "                neg_idxs = neg_idxs + (neg_idxs >= tszs)\n",
    ),
    (
        "speech.py",
        """        if neg_is_pos.any():
            if not hasattr(self, "_inftensor"):
                self._inftensor = float("-inf")
            logits[1:] = index_put(logits[1:], neg_is_pos, self._inftensor)
""",
        """        # under an all-False mask the write changes nothing: no need to test for it
        if not hasattr(self, "_inftensor"):
            self._inftensor = float("-inf")
        logits[1:] = index_put(logits[1:], neg_is_pos, self._inftensor)
""",
    ),
]

PAD_MASK_ON_DEVICE = (
    "helpers.py",
    """    if not isinstance(lengths, list):
        lengths = lengths.long().tolist()
    bs = int(len(lengths))
""",
    """    if not isinstance(lengths, list) and (xs is not None or maxlen is not None):
        # the width is known: compare the positions with the lengths where they are
        if maxlen is None:
            maxlen = xs.size(length_dim)
        else:
            assert (lengths <= maxlen).all()
        seq_range = torch.arange(0, maxlen, dtype=torch.int64, device=lengths.device)
        mask = seq_range[None, :] >= lengths.long()[:, None]
        if xs is not None:
            assert xs.size(0) == lengths.size(0), (xs.size(0), lengths.size(0))
            if length_dim < 0:
                length_dim = xs.dim() + length_dim
            ind = tuple(slice(None) if i in (0, length_dim) else None for i in range(xs.dim()))
            mask = mask[ind].expand_as(xs).to(xs.device)
        return mask
    if not isinstance(lengths, list):
        lengths = lengths.long().tolist()
    bs = int(len(lengths))
""",
)

ESPNET_ENCODE = [
    PAD_MASK_ON_DEVICE,
    (
        "speech.py",
        "        masks = (~make_pad_mask(ilens)[:, None, :]).to(xs_pad.device)\n",
        "        # the batch was cut to its longest utterance: the features' width is the longest length\n"
        "        masks = (~make_pad_mask(ilens, maxlen=xs_pad.size(1))[:, None, :]).to(xs_pad.device)\n",
    ),
]

ESPNET_E2E = [
    (
        "speech.py",
        """    _sos = ys_pad.new([sos])
    _eos = ys_pad.new([eos])
    ys = [y[y != ignore_id] for y in ys_pad]
    ys_in = [torch.cat([_sos, y], dim=0) for y in ys]
    ys_out = [torch.cat([y, _eos], dim=0) for y in ys]
    return pad_list(ys_in, eos), pad_list(ys_out, ignore_id)
""",
        """    # the padded width kept (one column more than ys_pad): the decoder is causal and the loss and accuracy skip
    # ignore_id targets, so a longer padding changes neither
    keep = ys_pad != ignore_id
    lens = keep.sum(1)[:, None]
    # the kept labels moved to the front of each row, in order (a stable sort on the padding flag)
    ys = ys_pad.gather(1, torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices)
    pos = torch.arange(ys_pad.size(1) + 1, device=ys_pad.device)[None, :]
    ys_in = torch.cat([ys.new_full((ys.size(0), 1), sos), ys], dim=1)
    ys_in = torch.where(pos <= lens, ys_in, eos)
    ys_out = torch.cat([ys, ys.new_full((ys.size(0), 1), ignore_id)], dim=1)
    ys_out = torch.where(pos < lens, ys_out, torch.where(pos == lens, eos, ignore_id))
    return ys_in, ys_out
""",
    ),
    (
        "speech.py",
        "            total = len(target) - ignore.sum().item()\n",
        "            total = len(target) - ignore.sum()\n",
    ),
    (
        "helpers.py",
        "    numerator = torch.sum(pad_pred.masked_select(mask) == pad_targets.masked_select(mask))\n",
        "    numerator = torch.sum((pad_pred == pad_targets) & mask)\n",
    ),
]

REWRITES.update({"wav2vec2_pretrain": WAV2VEC2, "espnet_asr_encode": ESPNET_ENCODE, "espnet_e2e_att": ESPNET_E2E})

# --------------------------------------------------------------------------- translation.py

FAIRSEQ = [
    (
        "translation.py",
        "            x = layer(x, encoder_padding_mask=encoder_padding_mask if has_pads else None)\n",
        "            x = layer(x, encoder_padding_mask=encoder_padding_mask)\n",
    ),
    (
        "translation.py",
        """        self_attn_padding_mask = None
        if self.cross_self_attention or prev_output_tokens.eq(self.padding_idx).any():
            self_attn_padding_mask = prev_output_tokens.eq(self.padding_idx)
""",
        """        # an all-False padding mask leaves the attention as it is: pass it whether or not there are pads
        self_attn_padding_mask = prev_output_tokens.eq(self.padding_idx)
""",
    ),
    (
        "translation.py",
        "        n_correct = torch.sum(lprobs.argmax(1).masked_select(mask).eq(target.masked_select(mask)))\n",
        "        n_correct = torch.sum(lprobs.argmax(1).eq(target) & mask)\n",
    ),
]

REWRITES.update({"fairseq_translation_step": FAIRSEQ})

# --------------------------------------------------------------------------- multimodal.py

BLIP = [
    (
        "multimodal.py",
        """        for b in range(bs):
            neg_idx = torch.multinomial(weights_t2i[b], 1).item()
            image_embeds_neg.append(image_embeds[neg_idx])
""",
        """        for b in range(bs):
            neg_idx = torch.multinomial(weights_t2i[b], 1)  # the same draw, kept a 1-element tensor
            image_embeds_neg.append(image_embeds.index_select(0, neg_idx)[0])
""",
    ),
    (
        "multimodal.py",
        """        for b in range(bs):
            neg_idx = torch.multinomial(weights_i2t[b], 1).item()
            text_ids_neg.append(encoder_input_ids[neg_idx])
            text_atts_neg.append(attention_mask[neg_idx])
""",
        """        for b in range(bs):
            neg_idx = torch.multinomial(weights_i2t[b], 1)
            text_ids_neg.append(encoder_input_ids.index_select(0, neg_idx)[0])
            text_atts_neg.append(attention_mask.index_select(0, neg_idx)[0])
""",
    ),
    (
        "multimodal.py",
        """        ptr = int(self.ptr_queue)
        assert self.queue_size % batch_size == 0  # for simplicity

        # replace the keys at ptr (dequeue and enqueue)
        self.image_queue[:, ptr : ptr + batch_size] = image_feats.T
        self.text_queue[:, ptr : ptr + batch_size] = text_feats.T
        self.idx_queue[:, ptr : ptr + batch_size] = idxs.T
""",
        """        ptr = self.ptr_queue[0]
        assert self.queue_size % batch_size == 0  # for simplicity: the columns never wrap

        # replace the keys at ptr (dequeue and enqueue), the columns written by index
        cols = ptr + torch.arange(batch_size, device=ptr.device)
        self.image_queue[:, cols] = image_feats.T
        self.text_queue[:, cols] = text_feats.T
        self.idx_queue[:, cols] = idxs.T
""",
    ),
]

REWRITES.update({"blip_itm_retrieval": BLIP})

# --------------------------------------------------------------------------- recsys.py

DIN = [
    (
        "recsys.py",
        """            lookup_idx = np.array(sparse_input_dict[feature_name])
            input_tensor = X[:, lookup_idx[0] : lookup_idx[1]].long()
""",
        """            lookup_idx = sparse_input_dict[feature_name]  # a (start, end) tuple of ints
            input_tensor = X[:, lookup_idx[0] : lookup_idx[1]].long()
""",
    ),
    (
        "recsys.py",
        """    lookup_idx = np.array(sparse_input_dict[maxlen_column[0]])
    return X[:, lookup_idx[0] : lookup_idx[1]].long()
""",
        """    lookup_idx = sparse_input_dict[maxlen_column[0]]
    return X[:, lookup_idx[0] : lookup_idx[1]].long()
""",
    ),
]

RECBOLE = [
    (
        "recsys.py",
        """        idxs = pos_index.argmax(axis=1)
        result = np.zeros_like(pos_index, dtype=np.float64)
        for row, idx in enumerate(idxs):
            if pos_index[row, idx] > 0:
                result[row, idx:] = 1 / (idx + 1)
            else:
                result[row, idx:] = 0
        return result
""",
        """        idxs = pos_index.argmax(axis=1)[:, None]
        # every row at once: 1 / rank of the first hit from that column on, 0 for a row without a hit
        hit = np.take_along_axis(pos_index, idxs, axis=1)
        cols = np.arange(pos_index.shape[1])[None, :]
        result = np.where((cols >= idxs) & hit, 1 / (idxs + 1), 0.0)
        return result
""",
    ),
    (
        "recsys.py",
        """        for row, idx in enumerate(idcg_len):
            idcg[row, idx:] = idcg[row, idx - 1]
""",
        """        # past its ideal length a row keeps the ideal DCG at idcg_len - 1 (the last column when idcg_len is 0)
        cols = np.arange(pos_index.shape[1])[None, :]
        idcg = np.take_along_axis(idcg, np.minimum(cols, idcg_len[:, None] - 1) % pos_index.shape[1], axis=1)
""",
    ),
]

REWRITES.update({"din_train_step": DIN, "recbole_sasrec_eval": RECBOLE})

# --------------------------------------------------------------------------- graph.py

PYG_GPS = [
    (
        "graph.py",
        "    def forward(self, x, edge_index, batch=None):\n",
        "    def forward(self, x, edge_index, batch=None, batch_size=None):\n",
    ),
    (
        "graph.py",
        """        h, mask = to_dense_batch(x, batch)
        h, _ = self.attn(h, h, h, key_padding_mask=~mask, need_weights=False)
        h = h[mask]
""",
        """        # every graph padded to the batch's node count (the padded keys are masked, the padded rows dropped)
        h, mask = to_dense_batch(x, batch, max_num_nodes=x.size(0), batch_size=batch_size)
        h, _ = self.attn(h, h, h, key_padding_mask=~mask, need_weights=False)
        # the True cells of mask in row-major order are the nodes in order: a stable sort puts them first
        h = h.flatten(0, 1)[torch.argsort((~mask).flatten().to(torch.int8), stable=True)[: x.size(0)]]
""",
    ),
    (
        "graph.py",
        """            x = conv(x, data.edge_index, data.batch)
        x = global_mean_pool(x, data.batch)
""",
        """            x = conv(x, data.edge_index, data.batch, batch_size=data.num_graphs)
        x = global_mean_pool(x, data.batch, size=data.num_graphs)
""",
    ),
]

REWRITES.update({"pyg_gps_graph_clf": PYG_GPS})

# --------------------------------------------------------------------------- selfsup.py

SWAV = [
    (
        "selfsup.py",
        """        idx_crops = torch.cumsum(torch.unique_consecutive(torch.tensor([inp.shape[-1] for inp in inputs]), return_counts=True)[1], 0)
""",
        """        # the end index of each run of equal crop sizes, on the host (the sizes are Python ints)
        sizes = [inp.shape[-1] for inp in inputs]
        idx_crops = [i + 1 for i in range(len(sizes)) if i + 1 == len(sizes) or sizes[i + 1] != sizes[i]]
""",
    ),
    (
        "selfsup.py",
        "            for v in np.delete(np.arange(np.sum(args.nmb_crops)), crop_id):\n",
        "            for v in [v for v in range(sum(args.nmb_crops)) if v != crop_id]:\n",
    ),
]

BEIT = [
    (
        "selfsup.py",
        "            labels = input_ids[bool_masked_pos]\n",
        "            # every token's id, the unmasked ones ignored by the loss\n"
        "            labels = torch.where(bool_masked_pos, input_ids, -100)\n",
    ),
    (
        "selfsup.py",
        """        outputs = self.model(samples, bool_masked_pos=bool_masked_pos, return_all_tokens=False)
        loss = nn.CrossEntropyLoss()(input=outputs.float(), target=labels)
""",
        """        # all the tokens' predictions; the mean over the masked ones (ignore_index skips the rest)
        outputs = self.model(samples, bool_masked_pos=bool_masked_pos, return_all_tokens=True)
        loss = nn.CrossEntropyLoss()(input=outputs.float().flatten(0, 1), target=labels.flatten())
""",
    ),
]

REWRITES.update({"swav_train_step": SWAV, "beit_mim_step": BEIT})

# --------------------------------------------------------------------------- protein.py

ESM = [
    (
        "protein.py",
        """        if not padding_mask.any():
            padding_mask = None
""",
        """        # an all-False key padding mask leaves the attention as it is: keep the mask either way
""",
    ),
]

OPENFOLD = [
    (
        "protein.py",
        "    drmsd = drmsd * (1 / (n * (n - 1))) if n > 1 else (drmsd * 0.0)\n",
        """    n = torch.as_tensor(n, dtype=drmsd.dtype)
    n_safe = n.clamp(min=2)
    drmsd = torch.where(n > 1, drmsd * (1 / (n_safe * (n_safe - 1))), drmsd * 0.0)
""",
    ),
    (
        "protein.py",
        """    def select_unmasked_coords(coords, mask):
        return torch.masked_select(coords, (mask > 0.0)[..., None]).reshape(-1, 3)

    batch_dims = reference.shape[:-2]
    flat_reference = reference.reshape((-1,) + reference.shape[-2:])
    flat_coords = coords.reshape((-1,) + reference.shape[-2:])
    flat_mask = mask.reshape((-1,) + mask.shape[-1:])
    superimposed_list = []
    rmsds = []
    for r, c, m in zip(flat_reference, flat_coords, flat_mask, strict=True):
        r_unmasked_coords = select_unmasked_coords(r, m)
        c_unmasked_coords = select_unmasked_coords(c, m)
        superimposed, rmsd = _superimpose_single(r_unmasked_coords, c_unmasked_coords)

        # This is very inelegant, but idk how else to invert the masking procedure.
        count = 0
        superimposed_full_size = torch.zeros_like(r)
        for i, unmasked in enumerate(m):
            if unmasked:
                superimposed_full_size[i] = superimposed[count]
                count += 1

        superimposed_list.append(superimposed_full_size)
        rmsds.append(rmsd)

    superimposed_stacked = torch.stack(superimposed_list, dim=0)
    rmsds_stacked = torch.stack(rmsds, dim=0)

    superimposed_reshaped = superimposed_stacked.reshape(batch_dims + coords.shape[-2:])
    rmsds_reshaped = rmsds_stacked.reshape(batch_dims)

    return superimposed_reshaped, rmsds_reshaped
""",
        """    # SVDSuperimposer's algorithm on every structure at once, the masked atoms weighted 0 and left 0
    m = (mask > 0.0)[..., None].to(coords.dtype)
    n = m.sum(dim=-2, keepdim=True)
    av1 = (coords * m).sum(dim=-2, keepdim=True) / n
    av2 = (reference * m).sum(dim=-2, keepdim=True) / n
    a = ((coords - av1) * m).transpose(-1, -2) @ ((reference - av2) * m)
    u, d, vt = torch.linalg.svd(a)
    # a reflection (negative determinant) is fixed by negating the last row of vt
    flip = torch.where(torch.linalg.det(u @ vt) < 0, -1.0, 1.0)
    vt = torch.cat([vt[..., :2, :], vt[..., 2:, :] * flip[..., None, None]], dim=-2)
    rot = u @ vt
    tran = av2 - av1 @ rot
    transformed = coords @ rot + tran
    diff = (transformed - reference) * m
    rmsds = torch.sqrt((diff * diff).sum(dim=(-1, -2)) / n[..., 0, 0])
    return transformed * m, rmsds
""",
    ),
]

REWRITES.update({"esm_variant_scoring": ESM, "openfold_val_metrics": OPENFOLD})

# --------------------------------------------------------------------------- medical.py

MONAI = [
    (
        "medical.py",
        "        reduce_axis: list[int] = torch.arange(2, len(input.shape)).tolist()\n",
        "        reduce_axis: list[int] = list(range(2, len(input.shape)))\n",
    ),
    (
        "medical.py",
        """        self.register_buffer("class_weight", weight)
""",
        """        self.register_buffer("class_weight", weight)
        # the weights never change after construction: validate them here, once
        if weight is not None and weight.min() < 0:
            raise ValueError("the value/values of the `weight` should be no less than 0.")
""",
    ),
    (
        "medical.py",
        """            if self.class_weight.min() < 0:
                raise ValueError("the value/values of the `weight` should be no less than 0.")
""",
        "",
    ),
]

REWRITES.update({"monai_seg_step": MONAI})

# --------------------------------------------------------------------------- lm.py

NANOGPT = [
    (
        "lm.py",
        """        x = torch.stack([torch.from_numpy((data[i : i + self.block_size]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1 : i + 1 + self.block_size]).astype(np.int64)) for i in ix])
""",
        """        # the windows gathered from the whole array at once (the same int64 values)
        tokens = torch.from_numpy(data.astype(np.int64))
        offsets = ix[:, None] + torch.arange(self.block_size)
        x = tokens[offsets]
        y = tokens[offsets + 1]
""",
    ),
    (
        "lm.py",
        # once get_batch traces, the loop of estimate_loss reaches this read-back too
        "                losses[k] = loss.item()\n",
        "                losses[k] = loss\n",
    ),
]

REWRITES.update({"nanogpt_eval": NANOGPT})

# --------------------------------------------------------------------------- text_recognition.py

SAR = [
    (
        "text_recognition.py",
        "class SAREncoder(nn.Module):\n",
        '''def lstm_unrolled(weights, prefix, x, num_layers):
    """A unidirectional ``nn.LSTM(batch_first=True)`` from zero states, with the weights named under ``prefix``
    (read through the parent's named_parameters: touching the nn.LSTM module itself breaks the graph)."""
    batch, steps, _ = x.shape
    layer_input = x
    for layer in range(num_layers):
        w_ih, w_hh = weights[f"{prefix}.weight_ih_l{layer}"], weights[f"{prefix}.weight_hh_l{layer}"]
        b_ih, b_hh = weights[f"{prefix}.bias_ih_l{layer}"], weights[f"{prefix}.bias_hh_l{layer}"]
        h = x.new_zeros(batch, w_hh.shape[1])
        c = x.new_zeros(batch, w_hh.shape[1])
        outs = []
        for t in range(steps):
            gates = F.linear(layer_input[:, t], w_ih, b_ih) + F.linear(h, w_hh, b_hh)
            i, f, g, o = gates.chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outs.append(h)
        layer_input = torch.stack(outs, dim=1)
    return layer_input


class SAREncoder(nn.Module):
''',
    ),
    (
        "text_recognition.py",
        "        holistic_feat = self.rnn_encoder(feat_v)[0]\n",
        '        holistic_feat = lstm_unrolled(dict(self.named_parameters()), "rnn_encoder", feat_v, 2)  # bsz * T * C\n',
    ),
    (
        "text_recognition.py",
        "        y = self.rnn_decoder(decoder_input)[0]\n",
        '        y = lstm_unrolled(dict(self.named_parameters()), "rnn_decoder", decoder_input, 2)\n',
    ),
]

REWRITES.update({"mmocr_sar_test": SAR})

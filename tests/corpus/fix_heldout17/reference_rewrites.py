"""Hand-written reference rewrites for the seventeenth held-out set: per program, exact-text replacements
``(file, old, new)`` applied to a copy of the package whose ``# BREAK`` comments were stripped. Applied
together they remove every fixable break of the program while keeping its outputs and its parameters'
gradients (``check.py`` verifies both against the original run in eager)."""

from __future__ import annotations

REWRITES: dict[str, list[tuple[str, str, str]]] = {}

# --------------------------------------------------------------------------- captioning.py

SAT_VALIDATE = [
    (
        "captioning.py",
        """        decode_lengths = (caption_lengths - 1).tolist()

        # Create tensors to hold word predicion scores and alphas
        predictions = torch.zeros(batch_size, max(decode_lengths), vocab_size).to(device)
        alphas = torch.zeros(batch_size, max(decode_lengths), num_pixels).to(device)
""",
        """        decode_lengths = caption_lengths - 1  # kept as a tensor
        max_len = encoded_captions.size(1) - 1  # the padded length bounds every caption's

        # Create tensors to hold word predicion scores and alphas
        predictions = torch.zeros(batch_size, max_len, vocab_size).to(device)
        alphas = torch.zeros(batch_size, max_len, num_pixels).to(device)
""",
    ),
    (
        "captioning.py",
        """        for t in range(max(decode_lengths)):
            batch_size_t = sum([length > t for length in decode_lengths])
            attention_weighted_encoding, alpha = self.attention(encoder_out[:batch_size_t], h[:batch_size_t])
            gate = self.sigmoid(self.f_beta(h[:batch_size_t]))  # gating scalar, (batch_size_t, encoder_dim)
            attention_weighted_encoding = gate * attention_weighted_encoding
            h, c = self.decode_step(
                torch.cat([embeddings[:batch_size_t, t, :], attention_weighted_encoding], dim=1),
                (h[:batch_size_t], c[:batch_size_t]),
            )  # (batch_size_t, decoder_dim)
            preds = self.fc(self.dropout(h))  # (batch_size_t, vocab_size)
            predictions[:batch_size_t, t, :] = preds
            alphas[:batch_size_t, t, :] = alpha
""",
        """        for t in range(max_len):
            # every row steps; the finished ones (a suffix: the batch is sorted) are masked out of the outputs,
            # and no active row depends on them
            active = (decode_lengths > t).unsqueeze(1)
            attention_weighted_encoding, alpha = self.attention(encoder_out, h)
            gate = self.sigmoid(self.f_beta(h))
            attention_weighted_encoding = gate * attention_weighted_encoding
            h, c = self.decode_step(torch.cat([embeddings[:, t, :], attention_weighted_encoding], dim=1), (h, c))
            preds = self.fc(self.dropout(h))
            predictions[:, t, :] = torch.where(active, preds, 0.0)
            alphas[:, t, :] = torch.where(active, alpha, 0.0)
""",
    ),
    (
        "captioning.py",
        """            scores = pack_padded_sequence(scores, decode_lengths, batch_first=True).data
            targets = pack_padded_sequence(targets, decode_lengths, batch_first=True).data

            # Calculate loss
            loss = self.criterion(scores, targets)

            # Add doubly stochastic attention regularization
            loss += alpha_c * ((1.0 - alphas.sum(dim=1)) ** 2).mean()

            # Keep track of metrics
            top5 = accuracy(scores, targets, 5)
            self.top5accs.update(top5, sum(decode_lengths))
""",
        """            # the packed positions, as a mask over the padded scores and targets
            valid = torch.arange(scores.size(1), device=scores.device) < decode_lengths.unsqueeze(1)
            n_valid = valid.sum()

            # Calculate loss (the mean over the valid positions)
            loss = (F.cross_entropy(scores.transpose(1, 2), targets, reduction="none") * valid).sum() / n_valid

            # Add doubly stochastic attention regularization
            loss += alpha_c * ((1.0 - alphas.sum(dim=1)) ** 2).mean()

            # Keep track of metrics (top-5 hits over the valid positions, kept as a tensor)
            _, ind = scores.topk(5, 2, True, True)
            correct_total = (ind.eq(targets.unsqueeze(2)) & valid.unsqueeze(2)).float().sum()
            top5 = correct_total * (100.0 / n_valid)
            self.top5accs.update(top5, n_valid)
""",
    ),
]

REWRITES.update({"sat_validate": SAT_VALIDATE})

# --------------------------------------------------------------------------- trajectory.py

LSTM_UNROLLED = (
    "trajectory.py",
    """def get_noise(shape, noise_type):
""",
    """def lstm_unrolled(weights, inputs, state_tuple):
    \"\"\"A one-layer LSTM over (seq_len, batch, input), step by step with the layer's weights (gates i, f, g, o).\"\"\"
    w_ih, w_hh, b_ih, b_hh = weights
    h, c = state_tuple[0][0], state_tuple[1][0]
    outputs = []
    for x_t in inputs.unbind(0):
        gates = x_t @ w_ih.t() + b_ih + h @ w_hh.t() + b_hh
        i, f, g, o = gates.chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs, 0), (h.unsqueeze(0), c.unsqueeze(0))


def lstm_weights(lstm):
    \"\"\"The layer's parameters, kept outside the nn.LSTM module (which Dynamo does not trace).\"\"\"
    return (lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0)


def scene_matrix(seq_start_end, n):
    \"\"\"[scenes, pedestrians]: 1 where the pedestrian lies between the scene's bounds.\"\"\"
    ped = torch.arange(n, device=seq_start_end.device)
    return (ped >= seq_start_end[:, :1]) & (ped < seq_start_end[:, 1:])


def get_noise(shape, noise_type):
""",
)

LSTM_CALLS = [
    LSTM_UNROLLED,
    (
        "trajectory.py",
        "        self.encoder = nn.LSTM(embedding_dim, h_dim, num_layers, dropout=dropout)\n",
        "        self.encoder = nn.LSTM(embedding_dim, h_dim, num_layers, dropout=dropout)\n"
        "        self.encoder_weights = lstm_weights(self.encoder)\n",
    ),
    (
        "trajectory.py",
        "        self.decoder = nn.LSTM(embedding_dim, h_dim, num_layers, dropout=dropout)\n",
        "        self.decoder = nn.LSTM(embedding_dim, h_dim, num_layers, dropout=dropout)\n"
        "        self.decoder_weights = lstm_weights(self.decoder)\n",
    ),
    (
        "trajectory.py",
        "        output, state = self.encoder(obs_traj_embedding, state_tuple)\n",
        "        output, state = lstm_unrolled(self.encoder_weights, obs_traj_embedding, state_tuple)\n",
    ),
    (
        "trajectory.py",
        "            output, state_tuple = self.decoder(decoder_input, state_tuple)\n",
        "            output, state_tuple = lstm_unrolled(self.decoder_weights, decoder_input, state_tuple)\n",
    ),
]

POOL_DENSE = (
    "trajectory.py",
    """        pool_h = []
        for _, (start, end) in enumerate(seq_start_end):
            start = start.item()
            end = end.item()
            num_ped = end - start
            curr_hidden = h_states.view(-1, self.h_dim)[start:end]
            curr_end_pos = end_pos[start:end]
            # Repeat -> H1, H2, H1, H2
            curr_hidden_1 = curr_hidden.repeat(num_ped, 1)
            # Repeat position -> P1, P2, P1, P2
            curr_end_pos_1 = curr_end_pos.repeat(num_ped, 1)
            # Repeat position -> P1, P1, P2, P2
            curr_end_pos_2 = self.repeat(curr_end_pos, num_ped)
            curr_rel_pos = curr_end_pos_1 - curr_end_pos_2
            curr_rel_embedding = self.spatial_embedding(curr_rel_pos)
            mlp_h_input = torch.cat([curr_rel_embedding, curr_hidden_1], dim=1)
            curr_pool_h = self.mlp_pre_pool(mlp_h_input)
            curr_pool_h = curr_pool_h.view(num_ped, num_ped, -1).max(1)[0]
            pool_h.append(curr_pool_h)
        pool_h = torch.cat(pool_h, dim=0)
        return pool_h
""",
    """        # every ordered pair (i, j) of the batch at once: row i * n + j holds P_j - P_i and H_j, as the per-scene
        # repeats do; the pairs across scenes are left out of the max (the MLP is row-wise: no batch norm here)
        n = end_pos.size(0)
        scene = scene_matrix(seq_start_end, n).long().argmax(0)
        same_scene = scene.unsqueeze(1) == scene.unsqueeze(0)
        curr_rel_pos = (end_pos.unsqueeze(0) - end_pos.unsqueeze(1)).reshape(-1, 2)
        curr_rel_embedding = self.spatial_embedding(curr_rel_pos)
        mlp_h_input = torch.cat([curr_rel_embedding, h_states.view(-1, self.h_dim).repeat(n, 1)], dim=1)
        curr_pool_h = self.mlp_pre_pool(mlp_h_input).view(n, n, -1)
        curr_pool_h = curr_pool_h.masked_fill(~same_scene.unsqueeze(-1), float("-inf"))
        return curr_pool_h.max(1)[0]
""",
)

SGAN_GENERATOR = [
    *LSTM_CALLS,
    POOL_DENSE,
    (
        "trajectory.py",
        """            g_l2_loss_rel = torch.stack(g_l2_loss_rel, dim=1)
            for start, end in seq_start_end.data:
                _g_l2_loss_rel = g_l2_loss_rel[start:end]
                _g_l2_loss_rel = torch.sum(_g_l2_loss_rel, dim=0)
                _g_l2_loss_rel = torch.min(_g_l2_loss_rel) / torch.sum(loss_mask[start:end])
                g_l2_loss_sum_rel += _g_l2_loss_rel
""",
        """            g_l2_loss_rel = torch.stack(g_l2_loss_rel, dim=1)
            # each scene's rows summed by a one-hot scene matrix, the best of the k samples per scene
            in_scene = scene_matrix(seq_start_end, g_l2_loss_rel.size(0)).to(g_l2_loss_rel.dtype)
            scene_loss = (in_scene @ g_l2_loss_rel).min(1)[0] / (in_scene @ loss_mask.sum(1))
            g_l2_loss_sum_rel += scene_loss.sum()
""",
    ),
]

SGAN_EVALUATE = [
    *LSTM_CALLS,
    POOL_DENSE,
    (
        "trajectory.py",
        """    sum_ = 0
    error = torch.stack(error, dim=1)

    for start, end in seq_start_end:
        start = start.item()
        end = end.item()
        _error = error[start:end]
        _error = torch.sum(_error, dim=0)
        _error = torch.min(_error)
        sum_ += _error
    return sum_
""",
        """    error = torch.stack(error, dim=1)
    # the per-scene sums by a one-hot scene matrix, then the best sample of each scene
    in_scene = scene_matrix(seq_start_end, error.size(0)).to(error.dtype)
    return (in_scene @ error).min(1)[0].sum()
""",
    ),
]

REWRITES.update({"sgan_generator_step": SGAN_GENERATOR, "sgan_evaluate": SGAN_EVALUATE})

# --------------------------------------------------------------------------- kg.py

CONVE = [
    (
        "kg.py",
        """        batch_size = e1.shape[0]
        for i in range(batch_size):
            # these filters contain ALL labels
            filter1 = e2_multi1[i].long()
            filter2 = e2_multi2[i].long()

            # save the prediction that is relevant
            target_value1 = pred1[i, e2[i, 0].item()].item()
            target_value2 = pred2[i, e1[i, 0].item()].item()
            # zero all known cases (this are not interesting)
            # this corresponds to the filtered setting
            pred1[i][filter1] = 0.0
            pred2[i][filter2] = 0.0
            # write base the saved values
            pred1[i][e2[i]] = target_value1
            pred2[i][e1[i]] = target_value2

        # sort and rank
        max_values, argsort1 = torch.sort(pred1, 1, descending=True)
        max_values, argsort2 = torch.sort(pred2, 1, descending=True)

        argsort1 = argsort1.cpu().numpy()
        argsort2 = argsort2.cpu().numpy()
        for i in range(batch_size):
            # find the rank of the target entities
            rank1 = np.where(argsort1[i] == e2[i, 0].item())[0][0]
            rank2 = np.where(argsort2[i] == e1[i, 0].item())[0][0]
            # rank+1, since the lowest rank is rank 1 not rank 0
            ranks.append(rank1 + 1)
            ranks_left.append(rank1 + 1)
            ranks.append(rank2 + 1)
            ranks_right.append(rank2 + 1)

            # this could be done more elegantly, but here you go
            for hits_level in range(10):
                if rank1 <= hits_level:
                    hits[hits_level].append(1.0)
                    hits_left[hits_level].append(1.0)
                else:
                    hits[hits_level].append(0.0)
                    hits_left[hits_level].append(0.0)

                if rank2 <= hits_level:
                    hits[hits_level].append(1.0)
                    hits_right[hits_level].append(1.0)
                else:
                    hits[hits_level].append(0.0)
                    hits_right[hits_level].append(0.0)

    return {
        "hits@1": np.mean(hits[0]),
        "hits@3": np.mean(hits[2]),
        "hits@10": np.mean(hits[9]),
        "hits_left@10": np.mean(hits_left[9]),
        "hits_right@10": np.mean(hits_right[9]),
        "mean_rank_left": np.mean(ranks_left),
        "mean_rank_right": np.mean(ranks_right),
        "mean_rank": np.mean(ranks),
        "mrr": np.mean(1.0 / np.array(ranks)),
    }
""",
        """        batch_size = e1.shape[0]
        rows = torch.arange(batch_size)
        # save the predictions that are relevant, zero all known answers (the filtered setting), write them back
        target_value1 = pred1[rows, e2[:, 0]]
        target_value2 = pred2[rows, e1[:, 0]]
        pred1 = pred1.scatter(1, e2_multi1.long(), 0.0).scatter(1, e2, target_value1.unsqueeze(1))
        pred2 = pred2.scatter(1, e2_multi2.long(), 0.0).scatter(1, e1, target_value2.unsqueeze(1))

        # sort and rank: the target's position in its row's descending order
        max_values, argsort1 = torch.sort(pred1, 1, descending=True)
        max_values, argsort2 = torch.sort(pred2, 1, descending=True)
        rank1 = (argsort1 == e2).long().argmax(1)
        rank2 = (argsort2 == e1).long().argmax(1)
        ranks.append(torch.stack([rank1 + 1, rank2 + 1], 1).reshape(-1))
        ranks_left.append(rank1 + 1)
        ranks_right.append(rank2 + 1)
        for hits_level in range(10):
            hits[hits_level].append(torch.stack([rank1 <= hits_level, rank2 <= hits_level], 1).reshape(-1))
            hits_left[hits_level].append(rank1 <= hits_level)
            hits_right[hits_level].append(rank2 <= hits_level)

    def mean(values):  # numpy's float64 mean, handed back as numpy
        return torch.cat(values).double().mean().numpy()

    return {
        "hits@1": mean(hits[0]),
        "hits@3": mean(hits[2]),
        "hits@10": mean(hits[9]),
        "hits_left@10": mean(hits_left[9]),
        "hits_right@10": mean(hits_right[9]),
        "mean_rank_left": mean(ranks_left),
        "mean_rank_right": mean(ranks_right),
        "mean_rank": mean(ranks),
        "mrr": (1.0 / torch.cat(ranks).double()).mean().numpy(),
    }
""",
    ),
]

REWRITES.update({"conve_ranking": CONVE})

# --------------------------------------------------------------------------- stereo.py

ZERO_GRAD_NONE = """        for group in optimizer.param_groups:  # zero_grad(set_to_none=True)
            for p in group["params"]:
                p.grad = None
"""

GWCNET = [
    (
        "stereo.py",
        "        all_losses.append(weight * F.smooth_l1_loss(disp_est[mask], disp_gt[mask]))\n",
        """        # the mean over the valid pixels, as a masked mean of the elementwise loss
        elementwise = F.smooth_l1_loss(disp_est, disp_gt, reduction="none")
        all_losses.append(weight * (elementwise * mask).sum() / mask.sum())
""",
    ),
    ("stereo.py", "        optimizer.zero_grad()\n", ZERO_GRAD_NONE),
]

PSMNET = [
    (
        "stereo.py",
        """        if len(disp_true[mask]) == 0:
            loss = 0
        else:
            loss = F.l1_loss(img[mask], disp_true[mask])
""",
        """        # the end-point error over the valid pixels as a masked mean; 0 where there are none
        n_valid = mask.sum()
        masked_l1 = ((img - disp_true).abs() * mask).sum() / n_valid.clamp(min=1)
        loss = torch.where(n_valid == 0, torch.zeros_like(masked_l1), masked_l1)
""",
    ),
]

REWRITES.update({"gwcnet_train": GWCNET, "psmnet_test": PSMNET})

# --------------------------------------------------------------------------- anomaly.py

PATCHCORE = [
    (
        "anomaly.py",
        """                select_idx = torch.argmax(approximate_coreset_anchor_distances).item()
                coreset_indices.append(select_idx)
                coreset_select_distance = self._compute_batchwise_differences(
                    features, features[select_idx : select_idx + 1]
                )
""",
        """                select_idx = torch.argmax(approximate_coreset_anchor_distances).reshape(1)  # an index tensor
                coreset_indices.append(select_idx)
                coreset_select_distance = self._compute_batchwise_differences(
                    features, features.index_select(0, select_idx)
                )
""",
    ),
    (
        "anomaly.py",
        "        return np.array(coreset_indices)\n",
        "        return torch.cat(coreset_indices)\n",
    ),
]

REWRITES.update({"patchcore": PATCHCORE})

# --------------------------------------------------------------------------- matching.py

LOFTR = [
    (
        "matching.py",
        """        if not pos_mask.any():
            pos_mask[0, 0, 0] = True
            if weight is not None:
                weight[0, 0, 0] = 0.0
            c_pos_w = 0.0
        if not neg_mask.any():
            neg_mask[0, 0, 0] = True
            if weight is not None:
                weight[0, 0, 0] = 0.0
            c_neg_w = 0.0
""",
        """        # by where on the any(), without reading it back
        first = torch.zeros_like(pos_mask)
        first[0, 0, 0] = True
        no_pos, no_neg = ~pos_mask.any(), ~neg_mask.any()
        pos_mask = pos_mask | (first & no_pos)
        neg_mask = neg_mask | (first & no_neg)
        if weight is not None:
            weight = torch.where(first & (no_pos | no_neg), 0.0, weight)
        c_pos_w = torch.where(no_pos, 0.0, c_pos_w)
        c_neg_w = torch.where(no_neg, 0.0, c_neg_w)
""",
    ),
    (
        "matching.py",
        """            loss_pos = -alpha * torch.pow(1 - conf[pos_mask], gamma) * (conf[pos_mask]).log()
            loss_neg = -alpha * torch.pow(conf[neg_mask], gamma) * (1 - conf[neg_mask]).log()
            if weight is not None:
                loss_pos = loss_pos * weight[pos_mask]
                loss_neg = loss_neg * weight[neg_mask]
            return c_pos_w * loss_pos.mean() + c_neg_w * loss_neg.mean()
""",
        """            # the focal terms over every entry; the means over the positive / negative entries by masks
            loss_pos = -alpha * torch.pow(1 - conf, gamma) * conf.log()
            loss_neg = -alpha * torch.pow(conf, gamma) * (1 - conf).log()
            if weight is not None:
                loss_pos = loss_pos * weight
                loss_neg = loss_neg * weight
            loss_pos = (loss_pos * pos_mask).sum() / pos_mask.sum()
            loss_neg = (loss_neg * neg_mask).sum() / neg_mask.sum()
            return c_pos_w * loss_pos + c_neg_w * loss_neg
""",
    ),
]

REWRITES.update({"loftr_coarse_loss": LOFTR})

# --------------------------------------------------------------------------- parsing.py

SUPAR = [
    (
        "parsing.py",
        """        s_arc, arcs = s_arc[mask], arcs[mask]
        s_rel, rels = s_rel[mask], rels[mask]
        s_rel = s_rel[torch.arange(len(arcs)), arcs]
        arc_loss = self.criterion(s_arc, arcs)
        rel_loss = self.criterion(s_rel, rels)
""",
        """        # every token scored, the masked-out ones weighted out of the means
        weights = mask.to(s_arc.dtype)
        ce = nn.functional.cross_entropy
        arc_loss = (ce(s_arc.transpose(1, 2), arcs, reduction="none") * weights).sum() / weights.sum()
        s_rel = s_rel.gather(2, arcs[..., None, None].expand(-1, -1, 1, s_rel.size(-1))).squeeze(2)
        rel_loss = (ce(s_rel.transpose(1, 2), rels, reduction="none") * weights).sum() / weights.sum()
""",
    ),
    (
        "parsing.py",
        """        lens, heads = lens.tolist(), arc_preds.tolist()
        bad = [not CoNLL.istree(seq[1 : i + 1], proj) for i, seq in zip(lens, heads)]  # noqa: B905
        if tree and any(bad):
""",
        """        # the tree check only matters under --tree: compute it only then
        if tree and any(
            not CoNLL.istree(seq[1 : i + 1], proj) for i, seq in zip(lens.tolist(), arc_preds.tolist())
        ):
""",
    ),
]

REWRITES.update({"supar_evaluate": SUPAR})

# --------------------------------------------------------------------------- pathology.py

CLAM = [
    (
        "pathology.py",
        """    def initialize(self):
        self.data = [{"count": 0, "correct": 0} for i in range(self.n_classes)]

    def log(self, Y_hat, Y):
        Y_hat = int(Y_hat)
        Y = int(Y)
        self.data[Y]["count"] += 1
        self.data[Y]["correct"] += Y_hat == Y

    def get_summary(self, c):
        count = self.data[c]["count"]
        correct = self.data[c]["correct"]
""",
        """    def initialize(self):
        # per-class counts as tensors, updated at the label without reading it back
        self.counts = torch.zeros(self.n_classes, dtype=torch.long)
        self.corrects = torch.zeros(self.n_classes, dtype=torch.long)

    def log(self, Y_hat, Y):
        Y_hat = Y_hat.reshape(-1)
        Y = Y.reshape(-1)
        self.counts = self.counts.index_add(0, Y, torch.ones_like(Y))
        self.corrects = self.corrects.index_add(0, Y, (Y_hat == Y).long())

    def get_summary(self, c):
        count = int(self.counts[c])
        correct = int(self.corrects[c])
""",
    ),
    ("pathology.py", "        loss_value = loss.item()\n", "        loss_value = loss.detach()\n"),
]

REWRITES.update({"clam_train_slide": CLAM})

# --------------------------------------------------------------------------- timeseries.py, style.py, enhancement.py, neural_operator.py

NBEATS = [("timeseries.py", "        optimizer.zero_grad()\n", ZERO_GRAD_NONE)]

ADAIN = [
    ("style.py", "        optimizer.zero_grad()\n", ZERO_GRAD_NONE),
    (
        "style.py",
        """        writer.add_scalar("loss_content", loss_c.item(), i + 1)
        writer.add_scalar("loss_style", loss_s.item(), i + 1)
""",
        """        writer.add_scalar("loss_content", loss_c.detach(), i + 1)
        writer.add_scalar("loss_style", loss_s.detach(), i + 1)
""",
    ),
]

ZERO_DCE = [
    ("enhancement.py", "        optimizer.zero_grad()\n", ZERO_GRAD_NONE),
    (
        "enhancement.py",
        "        torch.nn.utils.clip_grad_norm(DCE_net.parameters(), config.grad_clip_norm)\n",
        "        torch.nn.utils.clip_grad_norm_(DCE_net.parameters(), config.grad_clip_norm)\n",
    ),
]

FNO = [
    ("neural_operator.py", "        optimizer.zero_grad()\n", ZERO_GRAD_NONE),
    (
        "neural_operator.py",
        "        self.train_l2 += loss.item()\n",
        "        self.train_l2 += loss.detach()\n",
    ),
]

REWRITES.update(
    {"nbeats_train_iteration": NBEATS, "adain_train_iteration": ADAIN, "zero_dce_train_iteration": ZERO_DCE}
)
REWRITES.update({"fno_darcy_iteration": FNO})

# --------------------------------------------------------------------------- continual.py

EWC = [
    (
        "continual.py",
        """        for n, p in deepcopy(self.params).items():
            self._means[n] = variable(p.data)
""",
        """        for n, p in self.params.items():  # detached clones, no deepcopy
            self._means[n] = variable(p.data.clone())
""",
    ),
    (
        "continual.py",
        """        for n, p in deepcopy(self.params).items():
            p.data.zero_()
            precision_matrices[n] = variable(p.data)
""",
        """        for n, p in self.params.items():  # zeros shaped like each parameter
            precision_matrices[n] = variable(torch.zeros_like(p.data))
""",
    ),
]

REWRITES.update({"ewc_process": EWC})

# --------------------------------------------------------------------------- flow.py

FLOWNET = [
    (
        "flow.py",
        """        EPE_map = EPE_map[~mask]
    if mean:
""",
        """        # the valid pixels' mean (or sum) by a mask instead of a selection
        valid = (~mask).to(EPE_map.dtype)
        if mean:
            return (EPE_map * valid).sum() / valid.sum()
        return (EPE_map * valid).sum() / batch_size
    if mean:
""",
    ),
    (
        "flow.py",
        """        self.losses.update(loss.item(), target.size(0))
        self.train_writer.add_scalar("train_loss", loss.item(), self.n_iter)
        self.flow2_EPEs.update(flow2_EPE.item(), target.size(0))
""",
        """        self.losses.update(loss.detach(), target.size(0))
        self.train_writer.add_scalar("train_loss", loss.detach(), self.n_iter)
        self.flow2_EPEs.update(flow2_EPE.detach(), target.size(0))
""",
    ),
]

REWRITES.update({"flownet_train_iteration": FLOWNET})

# --------------------------------------------------------------------------- depth.py

MONODEPTH2 = [
    (
        "depth.py",
        """        depth_gt = depth_gt[mask]
        depth_pred = depth_pred[mask]
        depth_pred *= torch.median(depth_gt) / torch.median(depth_pred)

        depth_pred = torch.clamp(depth_pred, min=1e-3, max=80)

        depth_errors = compute_depth_errors(depth_gt, depth_pred)
""",
        """        # the valid pixels stay in place: masked medians (the lower one, as torch.median takes) and masked means
        valid = mask.reshape(-1)
        depth_gt = depth_gt.reshape(-1)
        depth_pred = depth_pred.reshape(-1)
        n_valid = valid.sum()

        def masked_median(x):
            ordered = torch.sort(torch.where(valid, x, float("inf"))).values
            return ordered.gather(0, ((n_valid - 1) // 2).reshape(1))[0]

        depth_pred = depth_pred * (masked_median(depth_gt) / masked_median(depth_pred))

        depth_pred = torch.clamp(depth_pred, min=1e-3, max=80)

        # any positive depth where invalid: those pixels are weighted out of every mean
        depth_gt = torch.where(valid, depth_gt, 1.0)
        depth_pred = torch.where(valid, depth_pred, 1.0)
        depth_errors = compute_depth_errors_masked(depth_gt, depth_pred, valid)
""",
    ),
    (
        "depth.py",
        """def compute_depth_errors(gt, pred):
""",
        """def compute_depth_errors_masked(gt, pred, valid):
    \"\"\"compute_depth_errors over the valid pixels only, as masked means.\"\"\"
    w = valid.to(gt.dtype)
    n = w.sum()

    def mean(x):
        return (x * w).sum() / n

    thresh = torch.max((gt / pred), (pred / gt))
    a1 = mean((thresh < 1.25).float())
    a2 = mean((thresh < 1.25**2).float())
    a3 = mean((thresh < 1.25**3).float())
    rmse = torch.sqrt(mean((gt - pred) ** 2))
    rmse_log = torch.sqrt(mean((torch.log(gt) - torch.log(pred)) ** 2))
    abs_rel = mean(torch.abs(gt - pred) / gt)
    sq_rel = mean((gt - pred) ** 2 / gt)
    return abs_rel, sq_rel, rmse, rmse_log, a1, a2, a3


def compute_depth_errors(gt, pred):
""",
    ),
]

REWRITES.update({"monodepth2_log_step": MONODEPTH2})

# --------------------------------------------------------------------------- ood.py

MAHALANOBIS = [
    (
        "ood.py",
        """    num_sample_per_class = np.empty(num_classes)
    num_sample_per_class.fill(0)
    list_features = []
    for i in range(num_output):  # noqa: B007
        temp_list = []
        for j in range(num_classes):  # noqa: B007
            temp_list.append(0)
        list_features.append(temp_list)
""",
        """    # the samples kept in their loader order with their labels, instead of Python lists per class
    all_targets = []
    all_features = [[] for _ in range(num_output)]
""",
    ),
    (
        "ood.py",
        """        # construct the sample matrix
        for i in range(data.size(0)):
            label = target[i]
            if num_sample_per_class[label] == 0:
                out_count = 0
                for out in out_features:
                    list_features[out_count][label] = out[i].view(1, -1)
                    out_count += 1
            else:
                out_count = 0
                for out in out_features:
                    list_features[out_count][label] = torch.cat(
                        (list_features[out_count][label], out[i].view(1, -1)), 0
                    )
                    out_count += 1
            num_sample_per_class[label] += 1

    sample_class_mean = []
    out_count = 0
    for num_feature in feature_list:
        temp_list = torch.Tensor(num_classes, int(num_feature))
        for j in range(num_classes):
            temp_list[j] = torch.mean(list_features[out_count][j], 0)
        sample_class_mean.append(temp_list)
        out_count += 1

    precision = []
    for k in range(num_output):
        X = 0
        for i in range(num_classes):
            if i == 0:
                X = list_features[k][i] - sample_class_mean[k][i]
            else:
                X = torch.cat((X, list_features[k][i] - sample_class_mean[k][i]), 0)
""",
        """        # construct the sample matrix
        all_targets.append(target)
        for k in range(num_output):
            all_features[k].append(out_features[k])

    targets = torch.cat(all_targets)
    onehot = F.one_hot(targets, num_classes).to(torch.float32)  # [N, classes]
    sample_class_mean = []
    precision = []
    for k in range(num_output):
        feats = torch.cat(all_features[k])
        # each class's mean: its rows summed in order (the others add exact zeros), over its count
        class_mean = torch.stack(
            [(feats * onehot[:, j : j + 1]).sum(0) / onehot[:, j].sum() for j in range(num_classes)]
        )
        sample_class_mean.append(class_mean)
        # the features centred by their class means (the covariance does not depend on the row order)
        X = feats - class_mean[targets]
""",
    ),
]

REWRITES.update({"mahalanobis_estimator": MAHALANOBIS})

"""Hand-written reference rewrites for the sixteenth held-out set: per program, exact-text replacements
``(file, old, new)`` applied to a copy of the package whose ``# BREAK`` comments were stripped. Applied
together they remove every fixable break of the program while keeping its outputs and its parameters'
gradients (``check.py`` verifies both against the original run in eager)."""

from __future__ import annotations

REWRITES: dict[str, list[tuple[str, str, str]]] = {}

# --------------------------------------------------------------------------- detection.py

YOLACT = [
    (
        "detection.py",
        """        keep = conf_scores > self.conf_thresh
        scores = cur_scores[:, keep]
        boxes = decoded_boxes[keep, :]
        masks = mask_data[batch_idx, keep, :]

        if scores.size(1) == 0:
            return None

        boxes, masks, classes, scores = self.cc_fast_nms(boxes, masks, scores, self.nms_thresh, self.top_k)
""",
        """        keep = conf_scores > self.conf_thresh
        # every prior stays: the filtered ones sort below every kept one and leave with the suppressed ones
        scores = cur_scores
        boxes = decoded_boxes
        masks = mask_data[batch_idx]

        boxes, masks, classes, scores = self.cc_fast_nms(boxes, masks, scores, self.nms_thresh, self.top_k, keep)
        # the best kept box is never suppressed: nothing survives exactly when nothing passed the threshold
        if scores.size(0) == 0:
            return None
""",
    ),
    (
        "detection.py",
        """    def cc_fast_nms(self, boxes, masks, scores, iou_threshold: float = 0.5, top_k: int = 200):
        # Collapse all the classes into 1
        scores, classes = scores.max(dim=0)

        _, idx = scores.sort(0, descending=True)
""",
        """    def cc_fast_nms(self, boxes, masks, scores, iou_threshold: float = 0.5, top_k: int = 200, keep=None):
        # Collapse all the classes into 1
        scores, classes = scores.max(dim=0)

        _, idx = torch.where(keep, scores, float("-inf")).sort(0, descending=True)
""",
    ),
    (
        "detection.py",
        """        iou_max, _ = torch.max(iou, dim=0)

""",
        """        iou_max, _ = torch.max(iou, dim=0)
        # a prior under the confidence threshold never survives (it only ranks below the kept ones)
        iou_max = torch.where(keep[idx], iou_max, float("inf"))

""",
    ),
]

RETINAFACE = [
    (
        "detection.py",
        "        dets = np.hstack((boxes, scores[:, np.newaxis])).astype(np.float32, copy=False)\n",
        "        dets = np.hstack((boxes, scores[:, np.newaxis])).astype(np.float32)  # float32 already: no copy= needed\n",
    ),
]

DETR3D = [
    (
        "detection.py",
        """            thresh_mask = final_scores > self.score_threshold
            tmp_score = self.score_threshold
            while thresh_mask.sum() == 0:
                tmp_score *= 0.9
                if tmp_score < 0.01:
                    thresh_mask = final_scores > -1
                    break
                thresh_mask = final_scores >= tmp_score
""",
        """            # the thresholds the loop would try, in order (a fixed sequence of Python floats)
            thresholds = [self.score_threshold]
            tmp_score = self.score_threshold
            while True:
                tmp_score *= 0.9
                if tmp_score < 0.01:
                    break
                thresholds.append(tmp_score)
            # the first one some score passes wins, else every box: walk them backwards with where
            thresh_mask = final_scores > -1
            for k in reversed(range(len(thresholds))):
                cand = final_scores > thresholds[k] if k == 0 else final_scores >= thresholds[k]
                thresh_mask = torch.where(cand.any(), cand, thresh_mask)
""",
    ),
    (
        "detection.py",
        """            boxes3d = final_box_preds[mask]
            scores = final_scores[mask]
            labels = final_preds[mask]
""",
        """            # one selection: the scores and the labels ride along as two extra columns of the boxes
            final_box_preds = torch.cat([final_box_preds, final_scores[:, None], final_preds[:, None].to(final_box_preds.dtype)], -1)
            boxes3d = final_box_preds[mask]
            scores = boxes3d[:, -2]
            labels = boxes3d[:, -1].to(final_preds.dtype)
            boxes3d = boxes3d[:, :-2]
""",
    ),
]

RTDETR = [
    (
        "detection.py",
        """            labels = torch.tensor([mscoco_label2category[int(x.item())] for x in labels.flatten()]).to(boxes.device).reshape(labels.shape)
""",
        """            # the category ids as a lookup tensor indexed by the labels
            lookup = torch.tensor([mscoco_label2category[k] for k in range(len(mscoco_label2category))], device=boxes.device)
            labels = lookup[labels]
""",
    ),
]

REWRITES.update({"yolact_detect": YOLACT, "retinaface_detect": RETINAFACE, "detr3d_decode": DETR3D, "rtdetr_evaluate": RTDETR})

# --------------------------------------------------------------------------- diffusion.py, decoding.py

IMPROVED_DIFFUSION = [
    (
        "diffusion.py",
        "        logger.logkv_mean(key, values.mean().item())\n",
        "        logger.logkv_mean(key, values.mean().detach())  # the running mean kept as a 0-d tensor\n",
    ),
]

PLMS = [
    (
        "decoding.py",
        "    alphas_prev = np.asarray([alphacums[0]] + alphacums[ddim_timesteps[:-1]].tolist())\n",
        "    # the same float64 values as a tensor: the first alpha, then the selection shifted by one\n"
        "    alphas_prev = torch.cat([alphacums[:1], alphacums[ddim_timesteps[:-1]]]).double()\n",
    ),
]

REWRITES.update({"improved_diffusion_train": IMPROVED_DIFFUSION, "plms_txt2img": PLMS})

# --------------------------------------------------------------------------- metrics.py, helpers.py, pointcloud.py

TORCHMETRICS = [
    (
        "metrics.py",
        "    return torch.bincount(x, minlength=minlength)\n",
        """    # the mapping is below minlength (validated): count into minlength bins without a data-dependent length
    return torch.zeros(minlength, dtype=torch.long, device=x.device).scatter_add_(0, x, torch.ones_like(x))
""",
    ),
    (
        "metrics.py",
        """    if ignore_index is not None:
        idx = target != ignore_index
        preds = preds[idx]
        target = target[idx]
    unique_mapping = target.to(torch.long) * num_classes + preds.to(torch.long)
    bins = _bincount(unique_mapping, minlength=num_classes**2)
""",
        """    if ignore_index is not None:
        # every pixel is counted; the ignored ones fall in one extra bin past the confusion matrix, dropped after
        idx = target != ignore_index
        unique_mapping = torch.where(idx, target.to(torch.long) * num_classes + preds.to(torch.long), num_classes**2)
        bins = _bincount(unique_mapping, minlength=num_classes**2 + 1)[: num_classes**2]
    else:
        unique_mapping = target.to(torch.long) * num_classes + preds.to(torch.long)
        bins = _bincount(unique_mapping, minlength=num_classes**2)
""",
    ),
]

INTERSECTION_AND_UNION = (
    "helpers.py",
    """    intersection = output[output == target]
    # (torch.histc has no integer kernel on the CPU: the labels are counted as floats)
    area_intersection = torch.histc(intersection.float(), bins=K, min=0, max=K - 1)
""",
    """    # the disagreeing pixels moved out of the histogram's range instead of dropped
    intersection = torch.where(output == target, output, -1)
    area_intersection = torch.histc(intersection.float(), bins=K, min=0, max=K - 1)
""",
)

SEMSEG = [
    INTERSECTION_AND_UNION,
    ("metrics.py", "        self.loss_meter.update(loss.item(), n)\n", "        self.loss_meter.update(loss.detach(), n)\n"),
]

PACONV = [
    INTERSECTION_AND_UNION,
    ("pointcloud.py", "        self.loss_meter.update(loss.item(), n)\n", "        self.loss_meter.update(loss.detach(), n)\n"),
]

REWRITES.update({"torchmetrics_f1": TORCHMETRICS, "semseg_validate": SEMSEG, "paconv_dgcnn_train": PACONV})

# --------------------------------------------------------------------------- speaker.py

SPEECHBRAIN_EMBEDDING = [
    (
        "speaker.py",
        """            actual_size = torch.round(lengths[snt_id] * x.shape[1]).int()

            # computing statistics
            current_mean, current_std = self._compute_current_stats(x[snt_id, 0:actual_size, ...])
""",
        """            actual_size = torch.round(lengths[snt_id] * x.shape[1]).int()
            frame_mask = (torch.arange(x.shape[1], device=x.device) < actual_size).to(x.dtype)[:, None]

            # computing statistics over the unpadded frames (masked sums instead of a slice)
            current_mean, current_std = self._compute_current_stats_masked(x[snt_id], frame_mask)
""",
    ),
    (
        "speaker.py",
        """    def _compute_current_stats(self, x):
""",
        """    def _compute_current_stats_masked(self, x, frame_mask):
        n = frame_mask.sum(dim=0)
        if self.mean_norm:
            current_mean = ((x * frame_mask).sum(dim=0) / n).detach().data
        else:
            current_mean = torch.tensor([0.0], device=x.device)
        if self.std_norm:
            mean = (x * frame_mask).sum(dim=0) / n
            current_std = torch.sqrt((((x - mean) * frame_mask) ** 2).sum(dim=0) / (n - 1)).detach().data
        else:
            current_std = torch.tensor([1.0], device=x.device)
        current_std = torch.max(current_std, self.eps * torch.ones_like(current_std))
        return current_mean, current_std

    def _compute_current_stats(self, x):
""",
    ),
    (
        "speaker.py",
        """            try:
                x = layer(x, lengths=lengths)
            except TypeError:
                x = layer(x)
""",
        """            # only the SE-Res2Net blocks take lengths (a TDNNBlock's forward raises TypeError on it)
            if isinstance(layer, SERes2NetBlock):
                x = layer(x, lengths=lengths)
            else:
                x = layer(x)
""",
    ),
]

SPEECHBRAIN_EER = [
    (
        "speaker.py",
        "    thresholds = torch.unique(thresholds)\n",
        "    # duplicated candidates give the same rates and argmin keeps the first: the sorted values will do\n",
    ),
    (
        "speaker.py",
        "    EER = (FAR[min_index] + FRR[min_index]) / 2\n",
        "    EER = (FAR.gather(0, min_index[None]) + FRR.gather(0, min_index[None]))[0] / 2\n",
    ),
]

REWRITES.update({"speechbrain_embedding": SPEECHBRAIN_EMBEDDING, "speechbrain_eer": SPEECHBRAIN_EER})

# --------------------------------------------------------------------------- optim.py

LAMB = [
    (
        "optim.py",
        """                if weight_norm == 0 or adam_norm == 0:
                    trust_ratio = 1
                else:
                    trust_ratio = weight_norm / adam_norm
""",
        """                # 1 when either norm is zero, as a 0-d tensor either way
                trust_ratio = torch.where((weight_norm == 0) | (adam_norm == 0), torch.ones_like(weight_norm), weight_norm / adam_norm)
""",
    ),
    (
        "optim.py",
        "        self.optimizer.zero_grad()\n",
        "        for p in self.model.parameters():  # zero_grad(set_to_none=True)\n            p.grad = None\n",
    ),
    (
        "optim.py",
        '        self.event_writer.add_scalar("loss", loss.item(), step)\n',
        '        self.event_writer.add_scalar("loss", loss.detach(), step)\n',
    ),
]

REWRITES.update({"lamb_train_step": LAMB})

# --------------------------------------------------------------------------- rl.py

ALPHAZERO = [
    (
        "rl.py",
        "        boards, pis, vs = list(zip(*[examples[i] for i in sample_ids]))\n",
        """        # the history stacked once, the drawn examples gathered by a numpy index
        all_boards, all_pis, all_vs = (np.array(a) for a in zip(*examples))
        boards, pis, vs = all_boards[sample_ids], all_pis[sample_ids], all_vs[sample_ids]
""",
    ),
    ("rl.py", "        self.pi_losses.update(l_pi.item(), boards.size(0))\n", "        self.pi_losses.update(l_pi.detach(), boards.size(0))\n"),
    ("rl.py", "        self.v_losses.update(l_v.item(), boards.size(0))\n", "        self.v_losses.update(l_v.detach(), boards.size(0))\n"),
]

REWRITES.update({"alphazero_train": ALPHAZERO})

# --------------------------------------------------------------------------- attention.py

PERFORMER = [
    (
        "attention.py",
        """        if exists(self.feature_redraw_interval) and self.calls_since_last_redraw >= self.feature_redraw_interval:
            device = get_module_device(model)

            fast_attentions = find_modules(model, FastAttention)
            for fast_attention in fast_attentions:
                fast_attention.redraw_projection_matrix(device)

            self.calls_since_last_redraw.zero_()
            return
""",
        """        if exists(self.feature_redraw_interval):
            # every matrix is drawn; a where keeps the old one unless the interval is reached
            redraw = self.calls_since_last_redraw >= self.feature_redraw_interval
            device = get_module_device(model)

            fast_attentions = find_modules(model, FastAttention)
            for fast_attention in fast_attentions:
                fast_attention.redraw_projection_matrix_where(device, redraw)

            self.calls_since_last_redraw.copy_(torch.where(redraw, torch.zeros_like(self.calls_since_last_redraw), self.calls_since_last_redraw + 1))
            return
""",
    ),
    (
        "attention.py",
        """    @torch.no_grad()
    def redraw_projection_matrix(self, device):
""",
        """    @torch.no_grad()
    def redraw_projection_matrix_where(self, device, redraw):
        projections = self.create_projection(device=device)
        self.projection_matrix.copy_(torch.where(redraw, projections, self.projection_matrix))

    @torch.no_grad()
    def redraw_projection_matrix(self, device):
""",
    ),
]

REWRITES.update({"performer_lm": PERFORMER})

# --------------------------------------------------------------------------- detection.py (lufficc/SSD)

SSD = [
    (
        "detection.py",
        """        confidence = confidence[mask, :]
        classification_loss = F.cross_entropy(confidence.view(-1, num_classes), labels[mask], reduction="sum")

        pos_mask = labels > 0
        predicted_locations = predicted_locations[pos_mask, :].view(-1, 4)
        gt_locations = gt_locations[pos_mask, :].view(-1, 4)
        smooth_l1_loss = F.smooth_l1_loss(predicted_locations, gt_locations, reduction="sum")
        num_pos = gt_locations.size(0)
""",
        """        # every prior's loss, weighted by the masks instead of selected (the sums and their gradients are the same)
        ce = F.cross_entropy(confidence.view(-1, num_classes), labels.view(-1), reduction="none")
        classification_loss = (ce * mask.view(-1)).sum()

        pos_mask = labels > 0
        l1 = F.smooth_l1_loss(predicted_locations, gt_locations, reduction="none")
        smooth_l1_loss = (l1 * pos_mask.unsqueeze(-1)).sum()
        num_pos = pos_mask.sum()
""",
    ),
]

REWRITES.update({"ssd_multibox_loss": SSD})

# --------------------------------------------------------------------------- decoding.py (DiffWave)

DIFFWAVE = [
    ("decoding.py", "import math\n\nimport numpy as np\n", "import itertools\nimport math\nimport operator\n\nimport numpy as np\n"),
    (
        "decoding.py",
        """            T = []
            for s in range(len(inference_noise_schedule)):
                for t in range(len(training_noise_schedule) - 1):
                    if talpha_cum[t + 1] <= alpha_cum[s] <= talpha_cum[t]:
                        twiddle = (talpha_cum[t] ** 0.5 - alpha_cum[s] ** 0.5) / (talpha_cum[t] ** 0.5 - talpha_cum[t + 1] ** 0.5)
                        T.append(t + twiddle)
                        break
""",
        """            # the same search over Python floats: the schedules are constants (numpy's cumprod multiplies in order)
            talpha_cum_l = list(itertools.accumulate([1 - b for b in model.params.noise_schedule], operator.mul))
            inference_l = model.params.inference_noise_schedule if fast_sampling else model.params.noise_schedule
            alpha_cum_l = list(itertools.accumulate([1 - b for b in inference_l], operator.mul))
            T = []
            for s in range(len(alpha_cum_l)):
                for t in range(len(talpha_cum_l) - 1):
                    if talpha_cum_l[t + 1] <= alpha_cum_l[s] <= talpha_cum_l[t]:
                        twiddle = (talpha_cum_l[t] ** 0.5 - alpha_cum_l[s] ** 0.5) / (talpha_cum_l[t] ** 0.5 - talpha_cum_l[t + 1] ** 0.5)
                        T.append(t + twiddle)
                        break
""",
    ),
]

REWRITES.update({"diffwave_predict": DIFFWAVE})

# --------------------------------------------------------------------------- helpers.py (ConvNeXt's loggers), vision.py

CONVNEXT = [
    (
        "helpers.py",
        """            if isinstance(v, torch.Tensor):
                v = v.item()
            assert isinstance(v, (float, int))
            self.meters[k].update(v)
""",
        """            if isinstance(v, torch.Tensor):
                v = v.detach()  # the meter's sums work on a 0-d tensor
            assert isinstance(v, (float, int, torch.Tensor))
            self.meters[k].update(v)
""",
    ),
    (
        "helpers.py",
        """            if isinstance(v, torch.Tensor):
                v = v.item()
            assert isinstance(v, (float, int))
            self.writer.add_scalar(""",
        """            if isinstance(v, torch.Tensor):
                v = v.detach()  # the writer keeps a 0-d tensor as it is
            assert isinstance(v, (float, int, torch.Tensor))
            self.writer.add_scalar(""",
    ),
]

REWRITES.update({"convnext_train_step": CONVNEXT})

# --------------------------------------------------------------------------- diffusion.py (diffusers' DDPM)

DIFFUSERS_DDPM = [
    (
        "diffusion.py",
        """        prev_t = t - self.config.num_train_timesteps // num_inference_steps
        alpha_prod_t = self.alphas_cumprod[t]
        alpha_prod_t_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else self.one
""",
        """        prev_t = t - self.config.num_train_timesteps // num_inference_steps
        alpha_prod_t = self.alphas_cumprod[t.reshape(1)][0]
        alpha_prod_t_prev = th.where(prev_t >= 0, self.alphas_cumprod[prev_t.clamp(min=0).reshape(1)][0], self.one)
""",
    ),
    (
        "diffusion.py",
        """        # 1. compute alphas, betas
        alpha_prod_t = self.alphas_cumprod[t]
        alpha_prod_t_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else self.one
""",
        """        # 1. compute alphas, betas (the 0-d timesteps index as 1-element tensors; a where for the first step)
        alpha_prod_t = self.alphas_cumprod[t.reshape(1)][0]
        alpha_prod_t_prev = th.where(prev_t >= 0, self.alphas_cumprod[prev_t.clamp(min=0).reshape(1)][0], self.one)
""",
    ),
    (
        "diffusion.py",
        """        variance = 0
        if t > 0:
            device = model_output.device
            variance_noise = randn_tensor(model_output.shape, generator=generator, device=device, dtype=model_output.dtype)
            variance = (self._get_variance(t, predicted_variance=predicted_variance) ** 0.5) * variance_noise
""",
        """        # the noise is drawn at every step and scaled by zero at t == 0 (nothing random follows the last step)
        device = model_output.device
        variance_noise = randn_tensor(model_output.shape, generator=generator, device=device, dtype=model_output.dtype)
        variance = (self._get_variance(t, predicted_variance=predicted_variance) ** 0.5) * variance_noise * (t > 0)
""",
    ),
]

REWRITES.update({"diffusers_ddpm": DIFFUSERS_DDPM})

LUCIDRAINS_DDIM = [
    (
        "diffusion.py",
        """        self.normalize = normalize_to_neg_one_to_one if auto_normalize else identity
        self.unnormalize = unnormalize_to_zero_to_one if auto_normalize else identity
""",
        """        self.normalize = normalize_to_neg_one_to_one if auto_normalize else identity
        self.unnormalize = unnormalize_to_zero_to_one if auto_normalize else identity

        # the DDIM times depend on the configuration alone: computed once here, on the host
        times = th.linspace(-1, self.num_timesteps - 1, steps=self.sampling_timesteps + 1)
        self.ddim_times = list(reversed(times.int().tolist()))
""",
    ),
    (
        "diffusion.py",
        """        times = th.linspace(-1, total_timesteps - 1, steps=sampling_timesteps + 1)  # [-1, 0, 1, 2, ..., T-1] when sampling_timesteps == total_timesteps
        times = list(reversed(times.int().tolist()))
""",
        """        times = self.ddim_times
""",
    ),
]

REWRITES.update({"lucidrains_ddim": LUCIDRAINS_DDIM})

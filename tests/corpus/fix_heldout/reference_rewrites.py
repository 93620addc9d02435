"""Reference rewrites: for every ``# BREAK:`` (fixable) site, one source change that removes it.

``check.py`` applies each program's rewrites to a copy of this package (its ``# BREAK``
comments stripped), compiles the patched program and asserts that its outputs and the
gradients of its parameters equal the unpatched program's eager run, and that the only
user-code breaks left are the ``# BREAK must-not`` ones.  These are the answers a human
would write; they are here to back the marks, not to be shown to the tool under test.

``REWRITES[program]`` is a list of ``(file, old text, new text)``, each old text found once.
"""

from __future__ import annotations

REWRITES: dict[str, list[tuple[str, str, str]]] = {
 "llama_attention": [
  ("hf_style.py", """            if (attention_mask == 0).any():
                padding = (1.0 - attention_mask[:, None, None, :].to(attn_weights.dtype)) * torch.finfo(attn_weights.dtype).min
                attn_weights = attn_weights + padding""",
   """            padding = (1.0 - attention_mask[:, None, None, :].to(attn_weights.dtype)) * torch.finfo(attn_weights.dtype).min
            attn_weights = torch.where((attention_mask == 0).any(), attn_weights + padding, attn_weights)"""),
  ("hf_style.py", """            logger.warning_once(""", """            if not torch.compiler.is_compiling():
                logger.warning_once("""),
  ("helpers.py", """    if (attention_mask[:, -1] == 0).any():""", """    if not torch.compiler.is_compiling() and (attention_mask[:, -1] == 0).any():"""),
 ],
 "sentence_encoder": [
  ("hf_style.py", """        lengths = attention_mask.sum(-1).tolist()
        first_last = torch.stack([hidden[i, [0, n - 1]].mean(0) for i, n in enumerate(lengths)])""",
   """        last = (attention_mask.sum(-1) - 1)[:, None, None].expand(-1, 1, hidden.size(-1))
        first_last = torch.stack([hidden[:, 0], hidden.gather(1, last)[:, 0]], dim=1).mean(1)"""),
  ("helpers.py", """    print(f"[stats]""", """    if not torch.compiler.is_compiling():
        print(f"[stats]"""),
 ],
 "mixtral_moe": [
  ("hf_style.py", """        logger.debug(""", """        if not torch.compiler.is_compiling():
            logger.debug("""),
  ("hf_style.py", """            idx, top_x = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))""",
   """            weight = (routing_weights * (selected_experts == expert_idx)).sum(-1, keepdim=True)
            final_hidden_states = final_hidden_states + expert_layer(hidden_states) * weight"""),
 ],
 "nanogpt_train_step": [
  ("training.py", """        self.optimizer.zero_grad(set_to_none=True)""", """        for p in self.model.parameters():
            p.grad = None"""),
  ("training.py", """            lossf = loss.item()
            print(""", """            lossf = loss.detach()
            if not torch.compiler.is_compiling():
                print("""),
 ],
 "eval_metrics": [("training.py", """        print(f"evaluated""", """        if not torch.compiler.is_compiling():
            print(f"evaluated""")],
 "wgan_gp": [
  ("training.py", """        interpolates = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
        d_interpolates = self.critic(interpolates)
        gradients = torch.autograd.grad(d_interpolates, interpolates, torch.ones_like(d_interpolates), create_graph=True)[0]""",
   """        interpolates = alpha * real + (1 - alpha) * fake
        gradients = torch.func.vmap(torch.func.grad(lambda x: self.critic(x).sum()))(interpolates)"""),
  ("training.py", """        if not torch.isfinite(gp):
            raise FloatingPointError("gradient penalty is not finite")""",
   """        torch._assert_async(torch.isfinite(gp), "gradient penalty is not finite")"""),
 ],
 "ema_teacher": [
  ("training.py", "targets = copy.deepcopy(teacher_out)", "targets = teacher_out.clone()"),
  ("training.py", """        logger.info("ema momentum""", """        if not torch.compiler.is_compiling():
            logger.info("ema momentum"""),
 ],
 "retinanet_postprocess": [
  ("helpers.py", """    height, width = image_size.tolist()
    x1, y1, x2, y2 = boxes.unbind(-1)
    x1 = x1.clamp(min=0, max=width)
    y1 = y1.clamp(min=0, max=height)
    x2 = x2.clamp(min=0, max=width)
    y2 = y2.clamp(min=0, max=height)""", """    height, width = image_size.to(boxes.dtype).unbind()
    x1, y1, x2, y2 = boxes.unbind(-1)
    x1 = x1.clamp(min=0).minimum(width)
    y1 = y1.clamp(min=0).minimum(height)
    x2 = x2.clamp(min=0).minimum(width)
    y2 = y2.clamp(min=0).minimum(height)"""),
 ],
 "centernet_decode": [
  ("detection.py", """        num_visible = (topk_scores > self.vis_thresh).sum().item()
        logger.info(""", """        num_visible = (topk_scores > self.vis_thresh).sum()
        if not torch.compiler.is_compiling():
            logger.info("""),
  ("detection.py", "visible_score = topk_scores[topk_scores > self.vis_thresh].sum()",
   "visible_score = torch.where(topk_scores > self.vis_thresh, topk_scores, 0).sum()"),
 ],
 "a2c_episode": [
  ("helpers.py", """    returns = []
    running = 0.0
    for r in reversed(rewards.tolist()):
        running = r + gamma * running
        returns.append(running)
    returns.reverse()
    return torch.tensor(returns, dtype=rewards.dtype)""", """    rewards = rewards.detach().double()
    returns = []
    running = torch.zeros((), dtype=rewards.dtype)
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = rewards[t] + gamma * running
        returns.append(running)
    returns.reverse()
    return torch.stack(returns).float()"""),
 ],
 "ppo_loss": [
  ("rollouts.py", """        print(f"finished episodes""", """        if not torch.compiler.is_compiling():
            print(f"finished episodes"""),
  ("rollouts.py", """        if approx_kl > 1.5 * self.target_kl:""", """        if not torch.compiler.is_compiling() and approx_kl > 1.5 * self.target_kl:"""),
  ("rollouts.py", """        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y""",
   """        explained_var = np.where(var_y == 0, np.float32(np.nan), 1 - np.var(y_true - y_pred) / var_y)"""),
 ],
 "episode_stats": [
  ("rollouts.py", """        mean_length = lengths.float().mean().item()
        logger.info(""", """        mean_length = lengths.float().mean()
        if not torch.compiler.is_compiling():
            logger.info("""),
 ],
 "logmel_frontend": [
  ("preprocess.py", """        if peak > 0:
            wav = wav / peak""", """        wav = wav / np.where(peak > 0, peak, np.float32(1.0))"""),
 ],
 "ragged_tokens": [
  ("preprocess.py", """        ids = torch.tensor([self.vocab.get(t, self.unk_id) for t in raw_tokens.tolist()])""",
   """        keys = torch.tensor(list(self.vocab))
        values = torch.tensor(list(self.vocab.values()))
        match = raw_tokens[:, None] == keys[None]
        ids = torch.where(match.any(1), (match.long() * values).sum(1), self.unk_id)"""),
 ],
 "tabular_scaler": [
  ("preprocess.py", """        n_clipped = float((arr == lo).sum() + (arr == hi).sum())
        logger.info(""", """        if not torch.compiler.is_compiling():
            n_clipped = float((arr == lo).sum() + (arr == hi).sum())
            logger.info("""),
  ("helpers.py", """    print(f"[stats]""", """    if not torch.compiler.is_compiling():
        print(f"[stats]"""),
 ],
}

"""Large graphs built as data (no compile): what a UNet- or ViT-sized program hands the
renderers, for tests and benchmarks of pictures in bounded time.

``varied_graph(n)`` is a UNet-like graph of about ``n`` nodes: stages of residual blocks
whose channel counts differ from stage to stage and block to block (so few blocks are
alike and repeat folding cannot shrink it), skip connections across stages, and one
symbolic size read by many nodes (the hub that makes Graphviz's layout explode).
"""

from __future__ import annotations

from dynscope._model import Graph, Node, TensorMeta

#: The ops of one residual block, each reading the op before it (names relative to the block).
_BLOCK = (
    ("torch.nn.functional.group_norm", "GroupNorm", "norm1"),
    ("torch.nn.functional.silu", "SiLU", "act1"),
    ("torch.conv2d", "Conv2d", "conv1"),
    ("torch.nn.functional.linear", "Linear", "time_emb_proj"),
    ("operator.add", "", ""),
    ("torch.nn.functional.group_norm", "GroupNorm", "norm2"),
    ("torch.nn.functional.silu", "SiLU", "act2"),
    ("torch.nn.functional.dropout", "Dropout", "dropout"),
    ("torch.conv2d", "Conv2d", "conv2"),
    ("operator.add", "", ""),
    ("operator.truediv", "", ""),
)


def _t(shape: tuple[int | str, ...], dtype: str = "float32") -> TensorMeta:
    return TensorMeta(kind="tensor", shape=shape, dtype=dtype, device="cpu")


def varied_graph(target_nodes: int = 5000, *, graph_id: int = 0, hub: bool = True) -> Graph:
    """A Graph of about ``target_nodes`` nodes whose blocks mostly differ (see the module)."""
    nodes: list[Node] = [Node(name="l_x_", op="placeholder", target="l_x_", outputs=(_t(("s0", 4, 64, 64)),))]
    if hub:
        nodes.append(Node(name="s0", op="placeholder", target="s0", outputs=(TensorMeta(kind="symint", value="s0"),)))
    prev = "l_x_"
    skips: list[str] = []
    stage = block = 0
    while len(nodes) < target_nodes - 2:
        # Channels grow with the stage and the block, so blocks of one stage differ in shape.
        channels = 32 + 8 * stage + block
        path = f"down_blocks.{stage}.resnets.{block}"
        stack = (("down_blocks", "ModuleList"), (f"down_blocks.{stage}", "DownBlock2D"), (path, "ResnetBlock2D"))
        first = prev
        for k, (target, cls, sub) in enumerate(_BLOCK):
            name = f"s{stage}_b{block}_{k}"
            args = [prev]
            if target == "operator.add" and k == len(_BLOCK) - 2:
                args.append(first)  # the residual
            if hub and target == "torch.nn.functional.group_norm":
                args.append("s0")  # a view on the symbolic batch: the hub
            if target == "torch.nn.functional.linear":
                args = ["l_x_"]  # the time embedding, from the input
            mod = (*stack, (f"{path}.{sub}", cls)) if sub else stack
            nodes.append(Node(
                name=name, op="call_function", target=target, args=tuple(args),
                outputs=(_t(("s0", channels, 64 >> min(stage, 4), 64 >> min(stage, 4))),),
                module_stack=mod, filename="unet_2d_blocks.py", lineno=100 + k,
                source=f"hidden_states = self.{sub or 'add'}(hidden_states)",
            ))
            prev = name
        block += 1
        if block == 3 + stage % 2:  # stages of 3 or 4 blocks, then a skip kept for later
            skips.append(prev)
            stage, block = stage + 1, 0
            if len(skips) > 2:  # a skip connection across stages, as a UNet's up path reads them
                name = f"skip_{stage}"
                nodes.append(Node(name=name, op="call_function", target="torch.cat", args=(prev, skips[-3]),
                                  outputs=(_t(("s0", 64, 8, 8)),), filename="unet_2d.py", lineno=900,
                                  source="sample = torch.cat([sample, res], dim=1)"))
                prev = name
    nodes.append(Node(name="output", op="output", target="output", args=(prev,)))
    ops = sum(1 for n in nodes if n.is_op)
    counts: dict[str, int] = {}
    for n in nodes:
        if n.is_op:
            counts[n.target] = counts.get(n.target, 0) + 1
    return Graph(
        id=graph_id, compile_id=f"{graph_id}/0", frame="forward", filename="unet_2d.py", lineno=1,
        node_count=len(nodes), op_count=ops,
        op_counts=tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        inputs=tuple(n.outputs[0] for n in nodes if n.op == "placeholder"),
        nodes=tuple(nodes),
    )

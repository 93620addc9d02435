"""Real programs from small configs for benchmarks/real_scale.py (no downloads): each
function returns ``(callable, {"calls": [...]})`` as ``dynscope report FILE.py:FUNC``
takes it, the calls being a first call and one more step.

Needs ``transformers`` and ``diffusers`` (not dynscope dependencies) for the HF and UNet
programs. Shapes are the models' own (ViT-tiny's 12 layers of width 192, a UNet with
cross-attention down and up blocks, Llama and GPT-2 blocks); sizes are small so a 2-core
machine compiles each in seconds to a minute.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

Program = tuple[Any, dict[str, list[Any]]]


def _seed() -> torch.Generator:
    torch.manual_seed(0)
    return torch.Generator().manual_seed(0)


def _vit(batch: int) -> Program:
    from transformers import ViTConfig, ViTModel

    gen = _seed()
    config = ViTConfig(hidden_size=192, num_hidden_layers=12, num_attention_heads=3, intermediate_size=768,
                       image_size=64, patch_size=16)
    model = ViTModel(config).eval()

    def infer(pixel_values: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return model(pixel_values=pixel_values).last_hidden_state

    x = torch.randn(batch, 3, 64, 64, generator=gen)
    return infer, {"calls": [x, x]}


def vit_b1() -> Program:
    """ViT-tiny-shaped inference, batch 1."""
    return _vit(1)


def vit_b8() -> Program:
    """ViT-tiny-shaped inference, batch 8."""
    return _vit(8)


def unet_train() -> Program:
    """One SGD train step of a small diffusers UNet2DConditionModel (cross-attention blocks)."""
    from diffusers import UNet2DConditionModel

    gen = _seed()
    unet = UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8,
    )
    opt = torch.optim.SGD(unet.parameters(), lr=1e-3)

    def step(sample: torch.Tensor, t: torch.Tensor, text: torch.Tensor) -> None:
        loss = unet(sample, t, encoder_hidden_states=text).sample.pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    call = (torch.randn(2, 4, 16, 16, generator=gen), torch.tensor([10, 500]), torch.randn(2, 8, 32, generator=gen))
    return step, {"calls": [call, call]}


def _llama(layers: int = 2) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


def llama_generate() -> Program:
    """HF Llama ``generate`` with a static cache, greedy, 8 new tokens."""
    gen = _seed()
    model = _llama()

    def generate(input_ids: torch.Tensor) -> torch.Tensor:
        return model.generate(input_ids, max_new_tokens=8, do_sample=False, cache_implementation="static",
                              pad_token_id=0)

    ids = torch.randint(1, 128, (1, 8), generator=gen)
    return generate, {"calls": [ids]}


def gpt2_train() -> Program:
    """One AdamW train step of a small HF GPT-2 (loss from labels)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    gen = _seed()
    model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=32, n_embd=64, n_layer=2, n_head=4)).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(input_ids: torch.Tensor) -> None:
        model(input_ids=input_ids, labels=input_ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    ids = torch.randint(0, 128, (2, 16), generator=gen)
    return step, {"calls": [ids, ids]}


def llama_per_block() -> Program:
    """torchtitan's recipe: each Llama decoder block ``torch.compile``d on its own, the
    program run as written (a forward and backward)."""
    gen = _seed()
    model = _llama(layers=4).train()
    for i, block in enumerate(model.model.layers):
        model.model.layers[i] = torch.compile(block)

    def step(input_ids: torch.Tensor) -> None:
        model(input_ids=input_ids, labels=input_ids).loss.backward()

    ids = torch.randint(0, 128, (2, 16), generator=gen)
    return step, {"calls": [ids, ids]}


def resnet18_train() -> Program:
    """One SGD train step of ResNet-18's layout at its own widths (64 to 512; the tests'
    ResNetish, torchvision's wheel does not load on CPU torch) on a 2x3x64x64 batch."""
    from tests.capture.test_export_corpus import ResNetish

    gen = _seed()
    model = ResNetish(width=64).train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    call = (torch.randn(2, 3, 64, 64, generator=gen), torch.tensor([1, 7]))
    return step, {"calls": [call, call]}


#: name -> builder, in the table's order.
PROGRAMS = {
    "vit-b1": vit_b1, "vit-b8": vit_b8, "unet-train": unet_train, "llama-generate": llama_generate,
    "gpt2-train-adamw": gpt2_train, "llama-per-block": llama_per_block, "resnet18-train": resnet18_train,
}

#: Programs that compile parts of themselves: dynscope watches them with capture() (report()
#: would compile the whole step around them).
SELF_COMPILING = ("llama-per-block",)

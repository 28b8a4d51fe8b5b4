"""The benchmark's models: the shapes PERFORMANCE.md measured, plus a small transformer.

Each factory returns ``(model, make_batch, loss_fn)`` built deterministically from a seed,
so every variant trains an identical copy on identical data. ``quick`` sizes are tiny
(the CLI's ``--quick`` and the tests); full sizes match the reference table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class Workload:
    name: str
    description: str
    model: nn.Module
    batch: tuple[torch.Tensor, torch.Tensor]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

    @property
    def tensors(self) -> int:
        return sum(1 for p in self.model.parameters() if p.requires_grad)

    @property
    def params(self) -> int:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)


def mlp(quick: bool) -> Workload:
    width, inp, batch = (128, 64, 16) if quick else (1024, 512, 32)
    layers: list[nn.Module] = [nn.Linear(inp, width), nn.ReLU()]
    for _ in range(3):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, 10))
    x, y = torch.randn(batch, inp), torch.randint(0, 10, (batch,))
    return Workload(
        "mlp_4x1024",
        f"MLP 4x{width} (10 tensors)",
        nn.Sequential(*layers),
        (x, y),
        nn.functional.cross_entropy,
    )


def cnn(quick: bool) -> Workload:
    blocks, ch, res, batch = (5, 8, 8, 4) if quick else (15, 16, 16, 8)
    layers: list[nn.Module] = []
    cin = 3
    for _ in range(blocks):
        layers += [nn.Conv2d(cin, ch, 3, padding=1, bias=False), nn.BatchNorm2d(ch), nn.ReLU()]
        cin = ch
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ch, 10)]
    x, y = torch.randn(batch, 3, res, res), torch.randint(0, 10, (batch,))
    n = 3 * blocks + 2
    return Workload(
        "cnn_small",
        f"small CNN ({n} tensors)",
        nn.Sequential(*layers),
        (x, y),
        nn.functional.cross_entropy,
    )


def linear_stack(quick: bool) -> Workload:
    depth, width, batch = (50, 16, 8) if quick else (200, 64, 16)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.Tanh()]
    x, y = torch.randn(batch, width), torch.randn(batch, width)
    return Workload(
        "linear_200x64",
        f"{depth}xLinear({width}) ({2 * depth} tensors)",
        nn.Sequential(*layers),
        (x, y),
        nn.functional.mse_loss,
    )


class _TinyLM(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, ff: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.encoder(self.embed(x)))
        return out


def transformer(quick: bool) -> Workload:
    vocab, d, heads, ff, nl, seq, batch = (
        (100, 32, 2, 64, 1, 16, 4) if quick else (1000, 128, 4, 256, 2, 32, 8)
    )
    model = _TinyLM(vocab, d, heads, ff, nl)
    x = torch.randint(0, vocab, (batch, seq))

    def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    return Workload("transformer_small", f"transformer {nl}x d{d}", model, (x, x.clone()), loss)


FACTORIES: dict[str, Callable[[bool], Workload]] = {
    "mlp_4x1024": mlp,
    "cnn_small": cnn,
    "linear_200x64": linear_stack,
    "transformer_small": transformer,
}


def build(name: str, quick: bool, seed: int = 0) -> Workload:
    torch.manual_seed(seed)
    return FACTORIES[name](quick)

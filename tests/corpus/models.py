"""Small, fast CPU builders of realistic model families, and their data.

Each family is written the way user code of that family is written (a GPT-2-style
decoder with causal self-attention spelled out, an LSTM language model, an MLP, a CNN
with BatchNorm, an HF-style model called with keyword arguments), small enough to train
for a few hundred steps in seconds on two cores. Plain torch only: the signal tests must
not depend on transformers or torchvision. Every builder takes a ``seed`` so a run is
deterministic; the data helpers are deterministic too (their own ``torch.Generator``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = [
    "GPT",
    "LSTMLM",
    "MLP",
    "GPTConfig",
    "HFOutput",
    "HFStyleLM",
    "SmallCNN",
    "build_cnn",
    "build_gpt",
    "build_hf_style",
    "build_lstm_lm",
    "build_mlp",
    "copy_task_batches",
    "image_batches",
    "regression_batches",
    "token_batches",
    "warmup_lr",
]


# --- GPT-2 style decoder ------------------------------------------------------------------


@dataclass
class GPTConfig:
    vocab_size: int = 64
    block_size: int = 32
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32
    dropout: float = 0.0
    tie_weights: bool = True


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.n_head = cfg.n_head
        self.n_embd = cfg.n_embd
        self.drop = nn.Dropout(cfg.dropout)
        mask = torch.tril(torch.ones(cfg.block_size, cfg.block_size))
        self.register_buffer("bias", mask.view(1, 1, cfg.block_size, cfg.block_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        hs = c // self.n_head
        q = q.view(b, t, self.n_head, hs).transpose(1, 2)
        k = k.view(b, t, self.n_head, hs).transpose(1, 2)
        v = v.view(b, t, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = self.drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.n_embd, 4 * cfg.n_embd),
            nn.GELU(),
            nn.Linear(4 * cfg.n_embd, cfg.n_embd),
            nn.Dropout(cfg.dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT-shaped: ``wte + wpe -> pre-LN blocks -> ln_f -> lm_head``."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_weights:
            self.lm_head.weight = self.wte.weight
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        _, t = idx.shape
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def build_gpt(seed: int = 0, **cfg: object) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(**cfg))  # type: ignore[arg-type]


# --- LSTM language model (the word_language_model example's shape) -------------------------


class LSTMLM(nn.Module):
    def __init__(self, vocab: int = 64, emb: int = 32, hidden: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.encoder = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, layers, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)
        self.vocab = vocab

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.encoder(idx))
        return self.decoder(out)

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self(idx)
        return F.cross_entropy(logits.reshape(-1, self.vocab), targets.reshape(-1))


def build_lstm_lm(seed: int = 0, **kw: int) -> LSTMLM:
    torch.manual_seed(seed)
    return LSTMLM(**kw)


# --- MLP ----------------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self, d_in: int = 16, hidden: int = 64, d_out: int = 1, depth: int = 3) -> None:
        super().__init__()
        dims = [d_in] + [hidden] * (depth - 1)
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(dims):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(dims[-1], d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def build_mlp(seed: int = 0, **kw: int) -> MLP:
    torch.manual_seed(seed)
    return MLP(**kw)


# --- small CNN with BatchNorm -------------------------------------------------------------


class SmallCNN(nn.Module):
    def __init__(self, channels: int = 3, classes: int = 10, width: int = 16) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(2 * width)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def build_cnn(seed: int = 0, **kw: int) -> SmallCNN:
    torch.manual_seed(seed)
    return SmallCNN(**kw)


# --- HF-style model (keyword call, output object with .loss/.logits) ------------------------


@dataclass
class HFOutput:
    """Like transformers' ``CausalLMOutput``: attribute access to the loss and logits."""

    loss: torch.Tensor | None
    logits: torch.Tensor


class HFStyleLM(nn.Module):
    """A tiny causal LM with the Hugging Face calling convention.

    ``model(input_ids=..., attention_mask=..., labels=...)`` returns an object with
    ``.loss`` and ``.logits``; labels equal to -100 are ignored and the shift to next-token
    targets happens inside, as in ``GPT2LMHeadModel``.
    """

    def __init__(self, vocab: int = 64, d: int = 32, n_layer: int = 2, max_len: int = 32) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.embed_positions = nn.Embedding(max_len, d)
        layer = nn.TransformerEncoderLayer(
            d, nhead=2, dim_feedforward=4 * d, dropout=0.0, batch_first=True, norm_first=True
        )
        self.layers = nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.vocab = vocab

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> HFOutput:
        assert input_ids is not None
        _, t = input_ids.shape
        pos = torch.arange(t, device=input_ids.device)
        x = self.embed_tokens(input_ids) + self.embed_positions(pos)
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
        pad = None if attention_mask is None else attention_mask == 0
        x = self.layers(x, mask=causal, src_key_padding_mask=pad, is_causal=True)
        logits = self.lm_head(self.norm(x))
        loss = None
        if labels is not None:
            shift_logits = logits[:, :-1].reshape(-1, self.vocab)
            shift_labels = labels[:, 1:].reshape(-1)
            loss = F.cross_entropy(shift_logits, shift_labels, ignore_index=-100)
        return HFOutput(loss, logits)


def build_hf_style(seed: int = 0, **kw: int) -> HFStyleLM:
    torch.manual_seed(seed)
    return HFStyleLM(**kw)


# --- data ---------------------------------------------------------------------------------


def token_batches(
    batch: int = 8, seq: int = 32, vocab: int = 64, seed: int = 0
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless ``(inputs, next-token targets)`` from a learnable periodic token stream.

    Each row is ``(start + k * stride) % vocab`` with a per-row start and stride, plus a
    little noise, so a model's loss falls from ``log(vocab)`` as it learns, as on text.
    """
    g = torch.Generator().manual_seed(seed)
    ar = torch.arange(seq + 1)
    while True:
        start = torch.randint(0, vocab, (batch, 1), generator=g)
        stride = torch.randint(1, 4, (batch, 1), generator=g)
        toks = (start + ar * stride) % vocab
        noise = torch.rand(batch, seq + 1, generator=g) < 0.05
        toks = torch.where(noise, torch.randint(0, vocab, toks.shape, generator=g), toks)
        yield toks[:, :-1].contiguous(), toks[:, 1:].contiguous()


def copy_task_batches(
    batch: int = 8, seq: int = 32, vocab: int = 64, seed: int = 0
) -> Iterator[dict[str, torch.Tensor]]:
    """HF-style batches: ``input_ids``, ``attention_mask`` (right padding) and ``labels``."""
    for x, _ in token_batches(batch, seq, vocab, seed):
        g = torch.Generator().manual_seed(int(x[0, 0]))
        lengths = torch.randint(seq // 2, seq + 1, (batch,), generator=g)
        mask = (torch.arange(seq).unsqueeze(0) < lengths.unsqueeze(1)).long()
        labels = torch.where(mask.bool(), x, torch.full_like(x, -100))
        yield {"input_ids": x, "attention_mask": mask, "labels": labels}


def regression_batches(
    batch: int = 32, d_in: int = 16, scale: float = 1.0, seed: int = 0
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``(x, y)`` with ``y`` a fixed noisy nonlinear function of ``x`` times ``scale``.

    ``scale`` large (e.g. 1000) is the un-normalised regression target users forget to
    standardise: healthy but with big gradient norms early on.
    """
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(d_in, 1, generator=g)
    while True:
        x = torch.randn(batch, d_in, generator=g)
        y = torch.tanh(x @ w) + 0.1 * x[:, :1] ** 2 + 0.05 * torch.randn(batch, 1, generator=g)
        yield x, y * scale


def image_batches(
    batch: int = 16, channels: int = 3, size: int = 16, classes: int = 10, seed: int = 0
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Images whose class is a coloured blob position (learnable), plus noise."""
    g = torch.Generator().manual_seed(seed)
    protos = torch.randn(classes, channels, size, size, generator=g)
    while True:
        y = torch.randint(0, classes, (batch,), generator=g)
        x = protos[y] + 0.8 * torch.randn(batch, channels, size, size, generator=g)
        yield x, y


def warmup_lr(step: int, peak: float, warmup: int, total: int) -> float:
    """Linear warm-up to ``peak`` then cosine decay (the GPT-2/nanoGPT schedule)."""
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * t)))

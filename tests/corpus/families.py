"""More model families, written as their users write them (issue #22): the word-language-
model example's LSTM updated by hand and clipped, GPT-2 from a tiny ``transformers``
config, a transformer-encoder classifier, a classifier with a custom loss module, and a
classifier trained until it has converged. Each builder is seeded; each data helper is
deterministic (its own ``torch.Generator``). GPT-2 needs ``transformers`` (a test
dependency); everything else is plain torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

# --- the word-language-model example (pytorch/examples, word_language_model/model.py) -----


class RNNModel(nn.Module):
    """The example's ``RNNModel``: encoder, LSTM, decoder, log-softmax output, its init."""

    def __init__(
        self,
        ntoken: int,
        ninp: int,
        nhid: int,
        nlayers: int,
        dropout: float = 0.2,
        tie_weights: bool = False,
    ) -> None:
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            self.decoder.weight = self.encoder.weight
        self.nhid = nhid
        self.nlayers = nlayers
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(
        self, input: torch.Tensor, hidden: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz: int) -> tuple[torch.Tensor, torch.Tensor]:
        weight = next(self.parameters())
        return (
            weight.new_zeros(self.nlayers, bsz, self.nhid),
            weight.new_zeros(self.nlayers, bsz, self.nhid),
        )


def build_word_lm(seed: int = 0, ntoken: int = 200, size: int = 64, layers: int = 2) -> RNNModel:
    torch.manual_seed(seed)
    return RNNModel(ntoken, size, size, layers)


def word_corpus(ntoken: int = 200, length: int = 60_000, seed: int = 0) -> torch.Tensor:
    """A token stream with text's statistics: Zipf-distributed words, each followed by
    one of a few likely successors most of the time (a learnable bigram structure)."""
    g = torch.Generator().manual_seed(seed)
    zipf = 1.0 / torch.arange(1, ntoken + 1, dtype=torch.float64)
    nxt = torch.multinomial(zipf.expand(ntoken, ntoken), 4, generator=g)
    out = torch.empty(length, dtype=torch.long)
    w = 0
    rnd = torch.rand(length, generator=g)
    pick = torch.randint(0, 4, (length,), generator=g)
    free = torch.multinomial(zipf, length, replacement=True, generator=g)
    for i in range(length):
        w = int(nxt[w, pick[i]]) if rnd[i] < 0.7 else int(free[i])
        out[i] = w
    return out


def batchify(data: torch.Tensor, bsz: int) -> torch.Tensor:
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous()


def get_batch(source: torch.Tensor, i: int, bptt: int) -> tuple[torch.Tensor, torch.Tensor]:
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].view(-1)


def repackage_hidden(h: Any) -> Any:
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def word_lm_batches(
    ntoken: int = 200, bsz: int = 10, bptt: int = 20, seed: int = 0
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The example's ``get_batch`` over the batchified corpus, epoch after epoch."""
    data = batchify(word_corpus(ntoken, seed=seed), bsz)
    while True:
        for i in range(0, data.size(0) - 1, bptt):
            yield get_batch(data, i, bptt)


# --- GPT-2 from a tiny transformers config ---------------------------------------------------


def build_gpt2(seed: int = 0, vocab: int = 128, n_embd: int = 64, n_layer: int = 2) -> nn.Module:
    """``GPT2LMHeadModel`` from a tiny ``GPT2Config`` (no pretrained weights)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(
        vocab_size=vocab,
        n_positions=64,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel(cfg)


def gpt2_batches(
    batch: int = 8, seq: int = 32, vocab: int = 128, seed: int = 0
) -> Iterator[dict[str, torch.Tensor]]:
    """``input_ids`` and ``labels`` (the model shifts them) from the Zipf word stream."""
    data = word_corpus(vocab, length=40_000, seed=seed)
    g = torch.Generator().manual_seed(seed)
    while True:
        starts = torch.randint(0, len(data) - seq - 1, (batch,), generator=g)
        ids = torch.stack([data[s : s + seq] for s in starts.tolist()])
        yield {"input_ids": ids, "labels": ids}


# --- a transformer-encoder classifier ---------------------------------------------------------


class EncoderClassifier(nn.Module):
    """Token classifier on ``nn.TransformerEncoder`` (post-LN, as PyTorch's tutorial)."""

    def __init__(self, vocab: int = 100, d: int = 32, classes: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 2, 4 * d, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(x) * math.sqrt(self.embed.embedding_dim)).mean(1))


def build_encoder(seed: int = 0) -> EncoderClassifier:
    torch.manual_seed(seed)
    return EncoderClassifier()


def sequence_class_batches(
    batch: int = 16, seq: int = 16, vocab: int = 100, classes: int = 4, seed: int = 0
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Sequences whose class is which quarter of the vocabulary most tokens come from."""
    g = torch.Generator().manual_seed(seed)
    q = vocab // classes
    while True:
        y = torch.randint(0, classes, (batch,), generator=g)
        own = y.unsqueeze(1) * q + torch.randint(0, q, (batch, seq), generator=g)
        other = torch.randint(0, vocab, (batch, seq), generator=g)
        x = torch.where(torch.rand(batch, seq, generator=g) < 0.6, own, other)
        yield x, y


# --- a classifier with a custom loss module ---------------------------------------------------


class FocalLoss(nn.Module):
    """Focal loss as users write it (an ``nn.Module``, not a ``_Loss`` subclass)."""

    def __init__(self, gamma: float = 2.0) -> None:
        super().__init__()
        self.gamma = gamma

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logp = F.log_softmax(logits, dim=-1).gather(1, target.unsqueeze(1)).squeeze(1)
        return (-((1 - logp.exp()) ** self.gamma) * logp).mean()


def build_classifier(seed: int = 0, d_in: int = 20, classes: int = 5) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(d_in, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, classes)
    )


def blob_batches(
    batch: int = 32, d_in: int = 20, classes: int = 5, spread: float = 1.0, seed: int = 0
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Gaussian blobs around fixed class centres (``spread`` small: separable)."""
    g = torch.Generator().manual_seed(seed)
    centres = 3.0 * torch.randn(classes, d_in, generator=g)
    while True:
        y = torch.randint(0, classes, (batch,), generator=g)
        yield centres[y] + spread * torch.randn(batch, d_in, generator=g), y


def converged_classifier(seed: int = 0, steps: int = 1500) -> nn.Sequential:
    """A classifier trained on separable blobs until its loss is ~1e-6: a model a user
    trained earlier and now trains again."""
    model = build_classifier(seed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    batches = blob_batches(spread=0.5, seed=seed + 100)
    for _ in range(steps):
        x, y = next(batches)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return model


def build_zero_head(seed: int = 0, d_in: int = 20, classes: int = 5) -> nn.Sequential:
    """A classifier whose output layer starts at zero (a common init for heads and
    residual branches): at step 1 only the head has a gradient."""
    model = build_classifier(seed, d_in, classes)
    last = model[-1]
    assert isinstance(last, nn.Linear)
    nn.init.zeros_(last.weight)
    nn.init.zeros_(last.bias)
    return model


class LoRALinear(nn.Module):
    """A frozen linear layer with a trainable low-rank update ``B @ A`` (B starts at 0)."""

    def __init__(self, base: nn.Linear, rank: int = 4) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.lora_a = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(rank))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + x @ self.lora_a.t() @ self.lora_b.t()


def build_lora(seed: int = 0) -> nn.Sequential:
    """A pretrained-looking classifier fine-tuned through LoRA adapters only."""
    model = build_classifier(seed)
    for i in (0, 2, 4):
        layer = model[i]
        assert isinstance(layer, nn.Linear)
        model[i] = LoRALinear(layer)
    return model

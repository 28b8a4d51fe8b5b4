"""A rank's read and clip on CUDA: no host sync on the training thread (R26), as in the
kernel. Skipped without a CUDA device.

Under ``torch.cuda.set_sync_debug_mode("error")`` the worker's step boundary reads every
step (clipping is on) and clips reusing the read; the norms reach the host on the agent's
side (``take_rows``), equal to torch's, and the clipped gradients equal
``clip_grad_norm_``'s bit for bit.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_a_rank_reads_and_clips_on_cuda_without_a_sync_on_the_training_thread() -> None:
    from jupyterlab_torchdbg.ranks.worker.boundary import Worker

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 8)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: the grads stay comparable
    x = torch.randn(32, 64, device="cuda") * 10
    worker = Worker("ipc:///nonexistent", "k")
    worker.ensure_agent = lambda: None  # type: ignore[method-assign]
    worker.agreed.clip = 0.01
    try:
        model(x).pow(2).mean().backward()
        reference = copy.deepcopy(model)
        for p, q in zip(model.parameters(), reference.parameters(), strict=True):
            q.grad = p.grad.clone()  # type: ignore[union-attr]
        expected = float(torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.01))
        worker.before_step(opt)  # the first read finds the model (frames, not timed)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(5):
                opt.zero_grad(set_to_none=True)
                model(x).pow(2).mean().backward()
                worker.before_step(opt)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert worker.errors == {}, worker.errors
        rows = worker.take_rows(100)  # the agent's side: waits for the copies
        assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
        assert rows[-1]["norm"] == pytest.approx(expected, rel=1e-5)
        assert worker.agreed.clips_reused == 6
        for p, q in zip(model.parameters(), reference.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad)  # type: ignore[arg-type]
    finally:
        worker.close("exited")

"""The gradient monitor in a real ipykernel, observed over the comm as the panel sees it.

Every comm message is validated against the protocol schema by the driver.
"""

from __future__ import annotations

import json
import textwrap

import numpy as np
from kernel_client import KernelDriver, merge_series

MLP = textwrap.dedent(
    """
    import json, torch, torch.nn as nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(),
                          nn.Linear(32, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    """
)


async def test_norms_equal_reference_in_a_real_kernel(loaded: KernelDriver) -> None:
    """No watch(), no code change: names from the namespace, values equal torch's."""
    comm_id = await loaded.open_comm()
    r = await loaded.run(
        MLP
        + textwrap.dedent(
            """
            from jupyterlab_torchdbg.testing import grad_monitor
            grad_monitor().set_mode('fixed', 1)   # the panel's set_stride(1)
            ref = {'total': [], 'layers': []}
            for i in range(30):
                opt.zero_grad()
                model(torch.randn(16, 10)).pow(2).mean().backward()
                gs = [p.grad for p in model.parameters()]
                ref['total'].append(float(torch.nn.utils.get_total_norm(gs)))
                ref['layers'].append([float(torch.linalg.vector_norm(torch.cat(
                    [gs[2 * j].flatten(), gs[2 * j + 1]]))) for j in range(3)])
                opt.step()
            print(json.dumps(ref))
            """
        )
    )
    ref = json.loads(r.stdout)
    await loaded.drain(0.3)
    pts = merge_series(loaded.messages("series", comm_id))
    xs, total = pts["grad/opt/total"]
    assert xs.tolist() == list(range(1, 31))
    np.testing.assert_allclose(total, ref["total"], rtol=1e-6)
    for j, layer in enumerate(("model.0", "model.2", "model.4")):
        np.testing.assert_allclose(
            pts[f"grad/opt/{layer}"][1], [row[j] for row in ref["layers"]], rtol=1e-6
        )
    status = loaded.messages("grads", comm_id)[-1].data
    track = status["tracks"][0]
    assert track["name"] == "opt" and track["step"] == 30 and track["state"] == "active"
    assert not loaded.messages("alert", comm_id)


async def test_exploding_rnn_alarms_while_the_cell_runs(loaded: KernelDriver) -> None:
    comm_id = await loaded.open_comm()
    await loaded.run(
        textwrap.dedent(
            """
            import time, torch, torch.nn as nn
            from jupyterlab_torchdbg import log, watch
            torch.manual_seed(0)
            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.rnn = nn.RNN(4, 32, batch_first=True)
                    self.head = nn.Linear(32, 1)
                def forward(self, x):
                    return self.head(self.rnn(x)[0][:, -1])
            model = Net()
            opt = torch.optim.SGD(model.parameters(), lr=0.5)
            x, y = torch.randn(16, 30, 4), torch.randn(16, 1)
            first_bad = None
            with watch(model, opt, stride=1):
                for step in range(1, 101):
                    opt.zero_grad()
                    loss = nn.functional.mse_loss(model(x), y)
                    log(loss=loss)
                    loss.backward()
                    bad = [n.rpartition('.')[0] for n, p in model.named_parameters()
                           if not torch.isfinite(torch.linalg.vector_norm(p.grad))]
                    if bad and first_bad is None:
                        first_bad = (step, 'model.' + bad[-1])
                    opt.step()
                    time.sleep(0.02)  # a slow-ish loop: the panel hears while it runs
                t_end = time.time()
                time.sleep(1.0)
            print(first_bad, t_end)
            """
        )
    )
    out = loaded.iopub[-1]  # noqa: F841 - keep the cell's messages for debugging
    alerts = [a for m in loaded.messages("alert", comm_id) for a in m.data["alerts"]]
    # The NaN is caught at its own step, before the weights change (on CPU the check is
    # free), and diagnosed at once; the explosion that led there is raised at the next
    # alarm check, so the two may arrive in either order.
    by_kind = {a["kind"]: a for a in alerts}
    assert sorted(by_kind) == ["explosion", "non_finite_cause"], alerts
    assert len(alerts) == 2, alerts
    cause = by_kind["non_finite_cause"]
    r = await loaded.value("first_bad")
    step, layer = r.strip("()").replace("'", "").split(", ")
    assert cause["step"] == int(step) and cause["layer"] == layer
    # finite gradient values whose float32 norm overflows: the gradients exploded (what
    # the bisect loop above sees as a non-finite norm too), not a NaN source
    assert cause["cause"] == "overflow" and "norm overflows float32" in cause["message"]
    assert "clip" in cause["remedy"].lower()
    assert by_kind["explosion"]["step"] < cause["step"]
    # Both arrived during the cell, not only at its end (which came 1 s after training).
    msgs = loaded.messages("alert", comm_id)
    last_comm = loaded.comm[-1].t
    assert all(last_comm - m.t > 0.5 for m in msgs)


async def test_r31_amp_skipped_step_not_alarmed_in_a_real_kernel(loaded: KernelDriver) -> None:
    comm_id = await loaded.open_comm()
    await loaded.run(
        MLP
        + textwrap.dedent(
            """
            scaler = torch.amp.GradScaler('cpu')
            from jupyterlab_torchdbg import watch
            h = watch(model, stride=1)
            for i in range(40):
                opt.zero_grad()
                loss = model(torch.randn(16, 10)).pow(2).mean()
                if i == 20:
                    loss = loss * float('inf')
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            """
        )
    )
    await loaded.drain(0.3)
    track = loaded.messages("grads", comm_id)[-1].data["tracks"][0]
    assert track["skipped_steps"] == 1 and track["skipped_at"] == [21]
    assert track["step"] == 39 and track["amp_scale"] == 32768.0
    assert not loaded.messages("alert", comm_id)


async def test_healthy_run_raises_no_alarm_in_a_real_kernel(loaded: KernelDriver) -> None:
    comm_id = await loaded.open_comm()
    await loaded.run(
        MLP
        + textwrap.dedent(
            """
            from jupyterlab_torchdbg import log
            for i in range(300):
                opt.zero_grad()
                x = torch.randn(16, 10)
                loss = (model(x) - x[:, :3]).pow(2).mean()
                log(loss=loss)
                loss.backward()
                opt.step()
            """
        )
    )
    await loaded.drain(0.3)
    assert not loaded.messages("alert", comm_id)
    track = loaded.messages("grads", comm_id)[-1].data["tracks"][0]
    assert track["step"] == 300 and track["mode"] == "auto"
    assert track["overhead"] is not None


async def test_vanishing_deep_sigmoid_mlp_in_a_real_kernel(loaded: KernelDriver) -> None:
    comm_id = await loaded.open_comm()
    await loaded.run(
        textwrap.dedent(
            """
            import torch, torch.nn as nn
            from jupyterlab_torchdbg import watch
            torch.manual_seed(2)
            layers = []
            for _ in range(20):
                layers += [nn.Linear(32, 32), nn.Sigmoid()]
            deep = nn.Sequential(*layers, nn.Linear(32, 1))
            opt = torch.optim.SGD(deep.parameters(), lr=0.1)
            watch(deep, stride=1)
            for i in range(60):
                opt.zero_grad()
                nn.functional.mse_loss(deep(torch.randn(16, 32)), torch.randn(16, 1)).backward()
                opt.step()
            """
        )
    )
    await loaded.drain(0.3)
    alerts = [a for m in loaded.messages("alert", comm_id) for a in m.data["alerts"]]
    assert [a["kind"] for a in alerts] == ["vanishing"]
    assert alerts[0]["layer"] == "deep.0"


async def test_torch_imported_after_loading_is_monitored(kernel: KernelDriver) -> None:
    await kernel.run("%load_ext jupyterlab_torchdbg")
    comm_id = await kernel.open_comm()
    await kernel.pump_until(lambda: bool(kernel.messages("grads", comm_id)))  # after snapshot
    status = kernel.messages("grads", comm_id)[-1].data
    assert status["state"] == "waiting" and "torch" in status["reason"]
    await kernel.run(MLP)  # imports torch; the hook attaches at the cell boundary
    await kernel.run(
        "for i in range(5):\n"
        "    opt.zero_grad(); model(torch.randn(4, 10)).sum().backward(); opt.step()"
    )
    await kernel.drain(0.3)
    track = kernel.messages("grads", comm_id)[-1].data["tracks"][0]
    assert track["step"] == 5 and track["sampled"] >= 1


async def test_watch_alone_loads_the_extension(kernel: KernelDriver) -> None:
    """``watch(model)`` in a notebook without %load_ext: it loads, then monitors."""
    await kernel.run(MLP + "from jupyterlab_torchdbg import watch\nh = watch(model, stride=1)")
    comm_id = await kernel.open_comm()
    assert comm_id not in kernel.closed  # the comm target exists now
    await kernel.run(
        "for i in range(5):\n"
        "    opt.zero_grad(); model(torch.randn(4, 10)).sum().backward(); opt.step()\n"
        "h.remove()"
    )
    await kernel.drain(0.3)
    xs, _ = merge_series(kernel.messages("series", comm_id))["grad/opt/total"]
    assert xs.tolist() == [1, 2, 3, 4, 5]

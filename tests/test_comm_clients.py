"""R46 in a real ipykernel: a tab's reloads leave one live comm; other clients keep theirs.

The panel sends a per-tab ``client_id`` in its ``open`` (kept across reloads of the tab).
A page that reloads, crashes or loses its network without closing its comm must not leave
a comm behind that every broadcast is copied to; a second tab, nbclient or a console on
the same kernel (R05) still each keep their own comm.
"""

from __future__ import annotations

from kernel_client import KernelDriver

HUB = "__import__('jupyterlab_torchdbg.kernel.extension', fromlist=['x']).current().hub"


async def live_comms(kernel: KernelDriver) -> int:
    return int(await kernel.value(f"{HUB}.count"))


async def broadcast_copies(kernel: KernelDriver) -> list[str]:
    """Broadcast one message from the kernel; the comm ids that received a copy."""
    before = len(kernel.comm)
    await kernel.run(f"_hub = {HUB}\n_hub.broadcast(_hub.hello(True))\ndel _hub")
    await kernel.drain(0.5)
    return sorted(m.comm_id for m in kernel.comm[before:] if m.method == "hello")


async def test_r46_tab_reloaded_50_times_keeps_one_live_comm(loaded: KernelDriver) -> None:
    ids = [await loaded.open_comm(client_id="tab-a") for _ in range(50)]
    # the kernel closed each older comm when the next one opened with the same id
    await loaded.pump_until(lambda: set(ids[:-1]) <= loaded.closed)
    assert ids[-1] not in loaded.closed
    assert await live_comms(loaded) == 1
    # per-comm traffic does not grow with the reloads: one copy of each broadcast
    assert await broadcast_copies(loaded) == [ids[-1]]
    # and the surviving comm works
    reply = await loaded.action(ids[-1], "snapshot")
    assert reply["method"] == "ack"


async def test_r46_r05_different_tabs_and_clients_without_id_all_stay(
    loaded: KernelDriver,
) -> None:
    a1 = await loaded.open_comm(client_id="tab-a")
    b = await loaded.open_comm(client_id="tab-b")
    # nbclient, a console or an older panel: no client_id, never closed by the rule
    plain1 = await loaded.open_comm()
    plain2 = await loaded.open_comm()
    # an id the schema does not allow counts as none (never closes anything)
    odd1 = await loaded.open_comm(client_id="../tab")
    odd2 = await loaded.open_comm(client_id="../tab")
    a2 = await loaded.open_comm(client_id="tab-a")  # tab A reloaded
    await loaded.pump_until(lambda: a1 in loaded.closed)
    await loaded.drain(0.3)
    assert loaded.closed == {a1}
    assert await live_comms(loaded) == 6
    assert await broadcast_copies(loaded) == sorted([a2, b, plain1, plain2, odd1, odd2])


async def test_r46_comm_closed_by_its_page_is_forgotten(loaded: KernelDriver) -> None:
    """pagehide closes the comm; the reloaded tab's new comm then replaces nothing."""
    first = await loaded.open_comm(client_id="tab-a")
    loaded.send_shell("comm_close", {"comm_id": first, "data": {}})
    await loaded.drain(0.3)
    assert await live_comms(loaded) == 0
    second = await loaded.open_comm(client_id="tab-a")
    assert await live_comms(loaded) == 1
    assert await broadcast_copies(loaded) == [second]

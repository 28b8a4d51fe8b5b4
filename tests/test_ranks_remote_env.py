"""``jupyterlab_torchdbg.ranks_env()``: what another host exports so that its ranks
attach to this kernel (README "Ranks on several hosts"); tests/test_ranks_multihost.py
uses it for real across two network namespaces."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

import jupyterlab_torchdbg
from jupyterlab_torchdbg.ranks.kernel import worker_env
from jupyterlab_torchdbg.ranks.kernel.endpoint import Endpoint
from jupyterlab_torchdbg.ranks.kernel.remote_env import NoRemoteEndpoint
from jupyterlab_torchdbg.ranks.wire import envelope
from jupyterlab_torchdbg.ranks.wire import transport as wire


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (wire.ENDPOINT_ENV, wire.KEY_ENV, envelope.JOB_ENV, wire.LISTEN_ENV):
        monkeypatch.delenv(name, raising=False)


def _loaded(host: str | None) -> tuple[Endpoint, Any]:
    """What %load_ext does for ranks: the endpoint, published to the environment."""
    ep = Endpoint(lambda w, t, c: None, host=host, job="00112233aabbccdd")
    return ep, worker_env.install(ep.address, ep.key, watch_torch=False, job=ep.job)


def test_without_a_tcp_endpoint_it_says_what_to_set(clean_env: None) -> None:
    with pytest.raises(RuntimeError, match="load the extension"):
        jupyterlab_torchdbg.ranks_env()
    ep, undo = _loaded(None)  # the default: an ipc socket, this machine only
    try:
        with pytest.raises(NoRemoteEndpoint, match=r"TORCHDBG_LISTEN=0\.0\.0\.0:PORT"):
            jupyterlab_torchdbg.ranks_env()
    finally:
        undo()
        ep.close()


def test_every_interface_is_reached_by_the_hosts_name_or_the_one_given(clean_env: None) -> None:
    ep, undo = _loaded("0.0.0.0")
    try:
        assert ep.address == f"tcp://127.0.0.1:{ep.port}"  # what local workers use
        env = jupyterlab_torchdbg.ranks_env("node0.cluster")
        assert env == {
            wire.ENDPOINT_ENV: f"tcp://node0.cluster:{ep.port}",
            wire.KEY_ENV: ep.key,
            envelope.JOB_ENV: "00112233aabbccdd",
            "PYTHONPATH": worker_env.BOOT_DIR,
        }
        assert jupyterlab_torchdbg.ranks_env()[wire.ENDPOINT_ENV] != ep.address
        # as shell lines: a job script's exports give a shell exactly these values
        shown = subprocess.run(
            ["sh", "-c", f"PYTHONPATH=/site\n{env}\nenv"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        for name, value in env.items():
            want = f"{value}:/site" if name == "PYTHONPATH" else value
            assert f"{name}={want}" in shown, (name, shown)
    finally:
        undo()
        ep.close()


def test_a_loopback_address_is_never_given_to_other_hosts(clean_env: None) -> None:
    # (an address other hosts reach is given as it is: tests/test_ranks_multihost.py)
    ep, undo = _loaded("127.0.0.1")
    try:
        assert ep.address.startswith("tcp://127.0.0.1:")
        assert "127.0.0.1" not in jupyterlab_torchdbg.ranks_env()[wire.ENDPOINT_ENV]
        assert jupyterlab_torchdbg.ranks_env("10.1.2.3")[wire.ENDPOINT_ENV].startswith(
            "tcp://10.1.2.3:"
        )
    finally:
        undo()
        ep.close()

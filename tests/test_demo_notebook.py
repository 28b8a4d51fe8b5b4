"""The demo notebook the README opens runs top to bottom (via nbclient, as CI would)."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbclient import NotebookClient

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo.ipynb"


def test_demo_notebook_runs_and_logs() -> None:
    nb = nbformat.read(DEMO, as_version=4)
    # The panel would load the extension; here we load it ourselves and check log() data
    # (names with a '/' belong to the gradient and memory monitors).
    nb.cells.insert(0, nbformat.v4.new_code_cell("%load_ext jupyterlab_torchdbg"))
    nb.cells.append(
        nbformat.v4.new_code_cell(
            "from jupyterlab_torchdbg.kernel.extension import current\n"
            "st = current().stream  # every run's log() series (runs.py), the earlier first\n"
            "s = list(st.retired.series(st._series.values()))\n"
            "def longest(n):\n"
            "    return max((x for x in s if x.name == n), key=lambda x: x.history.seen)\n"
            "print(sorted({x.name for x in s if '/' not in x.name}), longest('loss').history.seen,"
            " longest('accuracy').history.y[-1] > 0.9, any(True for _ in st.retired.series([])))"
        )
    )
    nb.cells.append(
        nbformat.v4.new_code_cell(
            "from jupyterlab_torchdbg import testing\n"
            "alerts = testing.grad_monitor().alerts.snapshot()\n"
            "rnn = sorted(a['kind'] for a in alerts if a['track'] == 'rnn_opt')\n"
            "bad = [(a['step'], a.get('cause')) for a in alerts if a['track'] == 'optimizer']\n"
            "print(rnn, bad, testing.exception_monitor().last['diagnosis']['category'])"
        )
    )
    # Right after the exploding-RNN cell, what its alarm's Replay button would run.
    rnn_cell = next(i for i, c in enumerate(nb.cells) if "rnn_opt.step()" in c.source)
    nb.cells.insert(
        rnn_cell + 1,
        nbformat.v4.new_code_cell(
            "import json\n"
            "from jupyterlab_torchdbg import testing\n"
            "r = testing.grad_monitor().replayer.run('rnn_opt')\n"
            "print(json.dumps({k: r[k] for k in ('cause', 'reproduces', 'user_loss', 'message')}))"
        ),
    )
    NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    # R47: the RNN alarm's replay runs the demo's own loss module and reproduces the
    # overflow (with F.mse_loss it could not re-run the loss, fell back to the sum of the
    # outputs, and said "does not reproduce: dropout or other randomness")
    res = json.loads(nb.cells[rnn_cell + 1].outputs[0]["text"])
    assert res["cause"] == "overflow" and res["reproduces"] is True, res
    assert res["user_loss"] == "same" and "random" not in res["message"], res
    out = nb.cells[-2].outputs[0]["text"].strip()
    assert out == "['accuracy', 'loss', 'lr'] 1920 True True"  # the training cell's run
    # the exploding-RNN cell raised the gradient alarms (the explosion, then the overflow
    # caught at its step); the bad batch was named at its step (the 121st of that cell's
    # run: each run counts its own steps from 1)
    # and skipped; the failing cell was diagnosed (its error is expected: tagged
    # raises-exception, as the demo means it to fail)
    out = nb.cells[-1].outputs[0]["text"].strip()
    # (the replay this test ran after the RNN cell is in the RNN's alerts too)
    expected = "['explosion', 'non_finite_cause', 'non_finite_replay'] [(121, 'input')]"
    assert out == f"{expected} shape_mismatch", out
    skipped = [c for c in nb.cells if c.cell_type == "code" and "skip_nonfinite=True" in c.source]
    skipped = skipped[0]
    assert skipped.outputs[-1]["text"].strip() == "weights finite: True"

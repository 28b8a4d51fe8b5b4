"""``python -m jupyterlab_torchdbg.bench [--quick] [--json PATH]``: the overhead benchmark.

What PERFORMANCE.md asks for: paired step-time ratios measured in one process, variants
interleaved round by round in shuffled order on identical model copies, warm-up rounds
discarded; per model the median ratio to "no monitoring" with a 95% bootstrap interval,
and the monitor's own time divided by ``get_total_norm``'s. Plus a streaming section
(points, messages and bytes per second through the real stream, sequence gaps).

Modules: ``models`` (workloads), ``variants`` (one training step per variant), ``paired``
(rounds and statistics), ``streaming``, ``log_stream`` (``log()`` with many series),
``load`` (what ``%load_ext`` costs), ``features`` (the run store and leak tracking),
``ranks`` (4 real gloo ranks, ``--ranks``), ``ranks_sim`` (hundreds of simulated ranks,
``--ranks-sim``), ``report`` (table), ``__main__`` (CLI). The
extension is loaded in-process against counting fake comms from ``..testing``, which the
tests share.
"""

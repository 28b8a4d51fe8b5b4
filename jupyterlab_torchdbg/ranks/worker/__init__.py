"""What runs in a worker process (a rank): its step boundary, its reads, its agent thread,
the ways a process becomes a worker (boot, mp.spawn's wrap, ``attach()``). Never imports
the kernel side of ranks (``ranks.kernel``)."""

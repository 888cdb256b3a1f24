"""The tooling behind the ``gpu-tc`` command: benchmark suites, peers, timing and
reports, the self-test and the demo.

Nothing here is imported by ``import gpu_tc``; peers (torch, pytblis, CuPy, ...) are
imported only when a benchmark case needs them.
"""

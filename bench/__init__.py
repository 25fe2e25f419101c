"""The benchmarks: each ``bench/<name>.py`` a scenario over the shared harness (``bench.harness``).

Run one from the root of a source checkout as a module, ``python -m bench.<name>``, or through
its ``make bench-…`` target; ``bench/README.md`` gives every benchmark's command and figures.
"""

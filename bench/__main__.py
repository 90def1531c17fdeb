"""Run every ``bench/bench_*.py`` module's ``main()`` in name order.

``python -m bench [NAME ...]`` runs only the benchmarks whose module name
contains one of the given words. Each benchmark prints its own figures,
as ratios to a ceiling measured in the same run where it has one.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time

import bench


def main(argv: list[str]) -> int:
    names = sorted(
        m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_")
    )
    if argv:
        names = [n for n in names if any(word in n for word in argv)]
    for name in names:
        print(f"== {name}", flush=True)
        start = time.perf_counter()
        importlib.import_module(f"bench.{name}").main()
        print(f"== {name}: {time.perf_counter() - start:.1f}s\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

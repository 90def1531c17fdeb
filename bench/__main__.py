"""Run the benchmarks: every ``bench/bench_*.py`` module's ``main()``, in name order.

``python -m bench [NAME ...]`` runs only the benchmarks whose module name
contains one of the given words; ``python -m bench --help`` lists them. Each
benchmark prints its own figures, as ratios to a ceiling measured in the same
run where it has one.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import pathlib
import pkgutil
import sys
import time

import bench


def _benchmarks() -> dict[str, str]:
    """Module name → the first line of its docstring (read, not imported: some import Spark)."""
    found: dict[str, str] = {}
    for m in sorted(pkgutil.iter_modules(bench.__path__), key=lambda m: m.name):
        if not m.name.startswith("bench_"):
            continue
        source = pathlib.Path(bench.__path__[0], f"{m.name}.py").read_text()
        doc = ast.get_docstring(ast.parse(source)) or ""
        found[m.name] = doc.strip().splitlines()[0] if doc.strip() else ""
    return found


def _parser(benchmarks: dict[str, str]) -> argparse.ArgumentParser:
    width = max(len(n) for n in benchmarks)
    listing = "\n".join(
        f"  {n.removeprefix('bench_'):<{width - 6}}  {d}" for n, d in benchmarks.items()
    )
    return argparse.ArgumentParser(
        prog="python -m bench",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Runs the benchmarks and prints their figures (not pass/fail); "
        "each sizes itself from BENCH_* variables named in its module.",
        epilog=f"benchmarks:\n{listing}\n\n"
        "examples:\n  python -m bench spark          # the Spark source only\n"
        "  python -m bench broker client  # two of them",
    )


def main(argv: list[str]) -> int:
    benchmarks = _benchmarks()
    parser = _parser(benchmarks)
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="run only the benchmarks whose name contains one of these words (default: all)",
    )
    args = parser.parse_args(argv)
    names = list(benchmarks)
    if args.names:
        names = [n for n in names if any(word in n for word in args.names)]
        if not names:
            parser.error(f"no benchmark matches {' '.join(args.names)}: see --help for the list")
    for name in names:
        print(f"== {name}", flush=True)
        start = time.perf_counter()
        importlib.import_module(f"bench.{name}").main()
        print(f"== {name}: {time.perf_counter() - start:.1f}s\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

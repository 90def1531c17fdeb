"""A Python thread that holds the GIL, for ``bench_go``'s "gil" rows.

Imported at start-up by every Python process with this folder on ``PYTHONPATH``
(Python imports a ``sitecustomize`` module if it finds one); it does nothing
unless ``BENCH_GIL_SWITCH`` names a file. While that file exists, a daemon
thread calls ``usleep`` through ``ctypes.PyDLL``, which keeps the GIL for the
whole call, 5 ms at a time: the broker's Python threads (its event loop, the
control plane) run only in the gaps, as behind a busy Python thread, while no
core is burnt, so what the rows measure is the GIL and not a CPU shortage.
The data plane's threads never take the GIL on an append's path: the rows show
whether that holds.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time

_SWITCH = os.environ.get("BENCH_GIL_SWITCH")
#: How long each hold lasts, in microseconds (the interpreter's switch interval).
HOLD_US = 5000


def _hold(switch: str) -> None:
    usleep = ctypes.PyDLL(None).usleep  # PyDLL: the GIL is not released for the call.
    usleep.argtypes = [ctypes.c_uint]
    while True:
        if os.path.exists(switch):
            usleep(HOLD_US)
        else:
            time.sleep(0.05)


if _SWITCH:
    threading.Thread(target=_hold, args=(_SWITCH,), name="bench GIL holder", daemon=True).start()

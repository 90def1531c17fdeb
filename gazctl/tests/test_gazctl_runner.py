"""How a command runs (gazette.gazctl.runner): Ctrl-C, whichever thread takes it."""

from __future__ import annotations

import subprocess
import sys

# A command idle on its event loop (as `journals read --block` is between messages)
# while another thread of the process takes SIGINT, as the kernel may pick any thread
# that does not block it (gRPC's poller). The loop must wake and end the command.
_IDLE_COMMAND = """
import asyncio, signal, threading, time
from gazette.gazctl import runner

def hit_from_another_thread():
    time.sleep(0.3)
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)

async def idle():
    threading.Thread(target=hit_from_another_thread, daemon=True).start()
    await asyncio.Event().wait()

runner.run(idle())
"""


def test_ctrl_c_taken_by_another_thread_ends_an_idle_command() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _IDLE_COMMAND], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 130, proc.stderr

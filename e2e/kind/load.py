"""A steady append load on one journal, then a read-back: run in a pod by the kind suite.

Appends one numbered JSON line at a time with ``gazctl journals append`` through the
brokers' Service (``BROKER_ADDRESS``) for ``LOAD_SECONDS``, while the test deletes
the journal's primary broker pod. An append counts as acknowledged only when gazctl
exits 0 (the broker committed it to every replica). Then it reads the whole journal
back and prints one JSON line: lines and bytes acknowledged, read back, and the
acknowledged ones missing from the read (which must be none). Each line carries a
``date`` field, the day the Spark example job counts it under.

Standard library and gazctl only: it runs in the gazette-gazctl image.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time


def main() -> int:
    journal = os.environ["JOURNAL"]
    seconds = float(os.environ.get("LOAD_SECONDS", "60"))
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    acked: list[str] = []
    failures = 0
    seq = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        line = json.dumps({"seq": seq, "date": today, "pad": "x" * 200}) + "\n"
        seq += 1
        try:
            proc = subprocess.run(
                ["gazctl", "journals", "append", "-l", f"name={journal}"],
                input=line,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        except subprocess.TimeoutExpired:
            failures += 1
            continue
        if proc.returncode == 0:
            acked.append(line)
        else:
            failures += 1
            print(f"append {seq - 1} failed: {proc.stderr.strip()[-300:]}", file=sys.stderr)
    read = subprocess.run(
        ["gazctl", "journals", "read", "-l", f"name={journal}"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = read.stdout.splitlines(keepends=True)
    present = set(lines)
    missing = [line for line in acked if line not in present]
    summary = {
        "attempted": seq,
        "acked": len(acked),
        "acked_bytes": sum(len(line) for line in acked),
        "failed": failures,
        "read_ok": read.returncode == 0,
        "read_lines": len(lines),
        "read_bytes": len(read.stdout),
        "missing": len(missing),
        "missing_first": missing[:3],
    }
    print(json.dumps(summary), flush=True)
    return 0 if read.returncode == 0 and not missing else 1


if __name__ == "__main__":
    sys.exit(main())

"""An agent that hands events to hookd and never blocks on delivery (Python, client/python).

    pip install ./client/python
    HOOKD_ADDR=127.0.0.1:7700 python examples/python/agent.py jobs 100 [SECONDS]

SECONDS (default 10) is how long it waits for hookd before exiting.
"""

import json
import os
import sys

from hookd_client import EmitError, Emitter, queue

name = sys.argv[1] if len(sys.argv) > 1 else "jobs"
count = int(sys.argv[2]) if len(sys.argv) > 2 else 10
wait = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
# 10,000 events buffered at most; emit() never waits: a full buffer refuses at once.
emitter = Emitter(os.environ.get("HOOKD_ADDR", "127.0.0.1:7700"))
for step in range(count):
    payload = json.dumps({"step": step, "status": "done"}).encode()
    try:
        emitter.emit(queue(name, payload, event_type="agent.step_finished"))
    except EmitError:
        pass  # counted in `refused`; the agent goes on either way
# Before exiting: give the buffer up to `wait` s to reach hookd; what is left comes back.
left = emitter.close(timeout=wait)
c = emitter.counters()
print(f"emitted {c.emitted} sent {c.sent} refused {c.refused} failed {c.failed} unacknowledged {len(left)}")
if left:
    print(f"hookd not reached: {emitter.last_error}", file=sys.stderr)

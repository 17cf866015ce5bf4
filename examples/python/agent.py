"""An agent that hands events to hookd and never blocks on delivery (Python, client/python).

    pip install ./client/python
    HOOKD_ADDR=127.0.0.1:7700 python examples/python/agent.py jobs 100
"""

import json
import os
import sys

from hookd_client import EmitError, Emitter, queue

name = sys.argv[1] if len(sys.argv) > 1 else "jobs"
count = int(sys.argv[2]) if len(sys.argv) > 2 else 10
# 10,000 events buffered at most; above 8,000 emit() waits 100 ms; then it raises BufferFull.
emitter = Emitter(os.environ.get("HOOKD_ADDR", "127.0.0.1:7700"))
for step in range(count):
    payload = json.dumps({"step": step, "status": "done"}).encode()
    try:
        emitter.emit(queue(name, payload, event_type="agent.step_finished"))
    except EmitError as e:
        print(f"event {step} not taken: {e}", file=sys.stderr)
# Before exiting: give the buffer up to 10 s to reach hookd.
emitter.close(timeout=10)
c = emitter.counters()
print(f"sent {c.sent} (throttled {c.throttled}, refused {c.refused}, failed {c.failed})")

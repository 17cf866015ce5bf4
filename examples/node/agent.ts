// An agent that hands events to hookd and never blocks on delivery (TypeScript, client/node).
//
//   (cd client/node && npm ci && npm run build) && (cd examples/node && npm ci && npm run build)
//   HOOKD_ADDR=127.0.0.1:7700 node examples/node/dist/agent.js jobs 100 [SECONDS]
//
// SECONDS (default 10) is how long it waits for hookd before exiting.
import { Emitter, EmitError, queue } from "@hookd/client";

const [name = "jobs", count = "10", wait = "10"] = process.argv.slice(2);
// 10,000 events buffered at most; emit() never waits: a full buffer throws BufferFull at once.
const emitter = new Emitter(process.env.HOOKD_ADDR ?? "127.0.0.1:7700");
for (let step = 0; step < Number(count); step++) {
  const payload = JSON.stringify({ step, status: "done" });
  try {
    emitter.emit(queue(name, payload, { event_type: "agent.step_finished" }));
  } catch (err) {
    if (!(err instanceof EmitError)) throw err; // refusals are counted in `refused`
  }
}
// Before exiting: give the buffer up to `wait` s to reach hookd; what is left comes back.
const left = await emitter.close(Number(wait) * 1000);
const c = emitter.counters();
console.log(`emitted ${c.emitted} sent ${c.sent} refused ${c.refused} failed ${c.failed} unacknowledged ${left.length}`);
if (left.length > 0) console.error(`hookd not reached: ${emitter.lastError}`);

// An agent that hands events to hookd and never blocks on delivery (TypeScript, client/node).
//
//   (cd client/node && npm ci && npm run build) && (cd examples/node && npm ci && npm run build)
//   HOOKD_ADDR=127.0.0.1:7700 node examples/node/dist/agent.js jobs 100
import { Emitter, queue } from "@hookd/client";

const [name = "jobs", count = "10"] = process.argv.slice(2);
// 10,000 events buffered at most; above 8,000 emit() waits 100 ms; then it throws BufferFull.
const emitter = new Emitter(process.env.HOOKD_ADDR ?? "127.0.0.1:7700");
for (let step = 0; step < Number(count); step++) {
  const payload = JSON.stringify({ step, status: "done" });
  try {
    await emitter.emit(queue(name, payload, { event_type: "agent.step_finished" }));
  } catch (err) {
    console.error(`event ${step} not taken: ${(err as Error).message}`);
  }
}
// Before exiting: give the buffer up to 10 s to reach hookd.
await emitter.close(10_000);
const c = emitter.counters();
console.log(`sent ${c.sent} (throttled ${c.throttled}, refused ${c.refused}, failed ${c.failed})`);

// The Node Emitter: its buffer rules on a fake hookd with recorded pauses, then against a real
// hookd at HOOKD_ADDR (required) configured as client/test-hookd.toml says (small marks: the
// hard-mark test needs them). The cargo test node_client_package starts that hookd; by hand:
// `hookd serve --config client/test-hookd.toml`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Emitter, BufferFull, Closed, Unflushed, queue, topic, hookdClient, metadata, retryInfoMs } from "../dist/index.js";

function fakeHookd(script = []) {
  const fake = { stored: new Set(), calls: [], hold: null };
  fake.send = async (batch) => {
    if (fake.hold) await fake.hold;
    const keys = batch.events.map((e) => e.idempotency_key);
    fake.calls.push(keys);
    const step = script.shift() ?? "accept";
    const results = keys.map((k) => {
      if (step === "busy") return { error: { code: 8, message: "over the hard mark", retry_after_ms: "1500" } };
      const duplicate = fake.stored.has(k);
      fake.stored.add(k);
      return { ok: { id: k, duplicate } };
    });
    return { results, throttle_ms: step === "throttle" ? "400" : "0" };
  };
  return fake;
}

test("a full buffer refuses at once, and slowDown says so first", async () => {
  const fake = fakeHookd();
  let release;
  fake.hold = new Promise((r) => (release = r));
  const pauses = [];
  const e = new Emitter("unused", { config: { capacity: 10, slowDownAt: 8 }, send: fake.send, sleep: async (ms) => pauses.push(ms) });
  let taken = 0;
  let refused = 0;
  const slow = [];
  for (let i = 0; i < 12; i++) {
    slow.push(e.slowDown());
    try {
      e.emit(queue("q", `e${i}`));
      taken++;
    } catch (err) {
      assert.ok(err instanceof BufferFull);
      refused++;
    }
  }
  assert.deepEqual([taken, refused], [10, 2]);
  assert.deepEqual(pauses, []);
  assert.deepEqual([slow.filter(Boolean).length, slow[7], slow[8]], [4, false, true]);
  const c = e.counters();
  assert.deepEqual([c.emitted, c.buffered, c.pressured, c.refused], [10, 10, 2, 2]);
  release();
  fake.hold = null;
  assert.deepEqual(await e.close(5000), []);
  assert.equal(e.counters().sent, 10);
  assert.throws(() => e.emit(queue("q", "late")), Closed);
});

test("close at its deadline gives back the unacknowledged events, and a late answer is not counted", async () => {
  const fake = fakeHookd();
  let release;
  fake.hold = new Promise((r) => (release = r));
  const e = new Emitter("unused", { send: fake.send });
  for (let i = 0; i < 3; i++) e.emit(queue("q", `e${i}`, { idempotency_key: `k${i}` }));
  const left = await e.close(100);
  assert.deepEqual(left.map((ev) => ev.idempotency_key), ["k0", "k1", "k2"]);
  release();
  await new Promise((r) => setTimeout(r, 10));
  const c = e.counters();
  assert.deepEqual([c.emitted, c.sent, c.abandoned, c.buffered], [3, 0, 3, 0]);
});

test("a strict flush rejects with the events", async () => {
  const fake = fakeHookd();
  let release;
  fake.hold = new Promise((r) => (release = r));
  const e = new Emitter("unused", { send: fake.send });
  e.emit(queue("q", "x", { idempotency_key: "only" }));
  await assert.rejects(e.flush(50, { strict: true }), (err) => err instanceof Unflushed && err.events[0].idempotency_key === "only");
  release();
  fake.hold = null;
  assert.deepEqual(await e.flush(5000), []);
  await e.close(1000);
});

test("a refused item waits the server's retry delay and keeps its key", async () => {
  const fake = fakeHookd(["busy", "accept"]);
  const sleeps = [];
  const e = new Emitter("unused", { send: fake.send, sleep: async (ms) => sleeps.push(ms) });
  for (let i = 0; i < 3; i++) e.emit(queue("q", `e${i}`));
  await e.close(5000);
  assert.deepEqual(sleeps, [1500]);
  assert.deepEqual(fake.calls[0], fake.calls[1]);
  assert.equal(new Set(fake.calls.flat()).size, 3);
  const c = e.counters();
  assert.deepEqual([c.sent, c.retries, c.failed], [3, 1, 0]);
});

test("a throttle hint asks for slowDown and pauses the sender", async () => {
  const fake = fakeHookd(["throttle"]);
  const sleeps = [];
  const e = new Emitter("unused", { send: fake.send, sleep: async (ms) => sleeps.push(ms) });
  e.emit(queue("q", "a"));
  await e.flush(5000);
  assert.ok(e.slowDown());
  e.emit(queue("q", "b"));
  await e.close(5000);
  assert.deepEqual(sleeps, [400]);
  assert.equal(e.counters().pressured, 1);
});

test("a JSON value is sent as its compact JSON", () => {
  assert.equal(queue("q", { step: 1, note: "café" }).payload.toString(), '{"step":1,"note":"café"}');
  assert.equal(topic("t", [1, 2]).payload.toString(), "[1,2]");
  assert.equal(queue("q", "text").payload, "text");
});

const addr = () => {
  assert.ok(process.env.HOOKD_ADDR, "HOOKD_ADDR must name a running hookd configured as client/test-hookd.toml (the cargo test node_client_package starts one)");
  return process.env.HOOKD_ADDR;
};
const call = (client, method, request) =>
  new Promise((resolve, reject) => client[method](request, (err, res) => (err ? reject(err) : resolve(res))));

async function drain(client, name) {
  const got = [];
  for (;;) {
    const r = await call(client, "Receive", { queue: name, max_messages: 1000, visibility_timeout_ms: 600000 });
    if (r.messages.length === 0) return got;
    got.push(...r.messages);
  }
}

test("against hookd: every emitted event is stored once, with its event type", async () => {
  const e = new Emitter(addr());
  for (let i = 0; i < 500; i++) e.emit(queue("node-agent", `ev-${i}`, { event_type: "agent.step" }));
  await e.close(30000);
  const c = e.counters();
  assert.deepEqual([c.sent, c.failed, c.buffered], [500, 0, 0]);
  const client = hookdClient(addr());
  const got = await drain(client, "node-agent");
  assert.deepEqual(got.map((m) => m.payload.toString()).sort(), Array.from({ length: 500 }, (_, i) => `ev-${i}`).sort());
  assert.ok(got.every((m) => m.event_type === "agent.step"));
  client.close();
});

test("against hookd: a published event reaches each subscribed queue once, with one event id", async () => {
  const client = hookdClient(addr());
  for (const name of ["node-sub-a", "node-sub-b"]) {
    await call(client, "PutSubscription", {
      subscription: { name, queue: name, event_types: ["node.*"], filter: { fields: {} } },
    });
  }
  const e = new Emitter(addr());
  e.emit(topic("node.published", "fan me out"));
  await e.close(30000);
  const a = await drain(client, "node-sub-a");
  const b = await drain(client, "node-sub-b");
  assert.deepEqual([a.length, b.length], [1, 1]);
  assert.equal(a[0].payload.toString(), "fan me out");
  assert.equal(a[0].event_id, b[0].event_id);
  assert.notEqual(a[0].id, b[0].id);
  client.close();
});

test("against hookd: an emitter for a tenant stores its events in that tenant", async () => {
  const client = hookdClient(addr());
  await call(client, "CreateTenant", { tenant: { name: "node-tenant" } });
  const e = new Emitter(addr(), { tenant: "node-tenant" });
  for (let i = 0; i < 50; i++) e.emit(queue("node-tenanted", `t-${i}`));
  await e.close(30000);
  assert.equal(e.counters().sent, 50);
  const own = await new Promise((resolve, reject) =>
    client.Receive({ queue: "node-tenanted", max_messages: 1000, visibility_timeout_ms: 600000 }, metadata({ tenant: "node-tenant" }), (err, res) =>
      err ? reject(err) : resolve(res),
    ),
  );
  assert.equal(own.messages.length, 50);
  assert.deepEqual(await drain(client, "node-tenanted"), [], "default's queue of that name holds none");
  const m = metadata({ token: "t", tenant: "x" });
  assert.deepEqual([m.get("authorization")[0], m.get("x-hookd-tenant")[0]], ["Bearer t", "x"]);
  client.close();
});

test("against hookd: at the hard mark RetryInfo is read and the emitter waits for room", async () => {
  const client = hookdClient(addr());
  const big = Buffer.alloc(2048, 120);
  let refusal;
  for (let i = 0; i < 100 && !refusal; i++) {
    await call(client, "Enqueue", { queue: "node-full", payload: big }).catch((err) => (refusal = err));
  }
  assert.ok(refusal, "hookd never refused");
  assert.equal(refusal.code, 8);
  assert.match(refusal.details, /backpressure\.destination_max_bytes/);
  assert.equal(retryInfoMs(refusal), 1000);
  const slept = [];
  const e = new Emitter(addr(), { sleep: async (ms) => { slept.push(ms); await new Promise((r) => setTimeout(r, 20)); } });
  for (let i = 0; i < 10; i++) e.emit(queue("node-full", big, { idempotency_key: `late-${i}` }));
  for (let i = 0; i < 500 && !slept.includes(1000); i++) await new Promise((r) => setTimeout(r, 10));
  assert.ok(slept.includes(1000), `no RetryInfo wait: ${slept}`);
  assert.equal(e.counters().sent, 0);
  const got = await drain(client, "node-full");
  await call(client, "Ack", { lease_ids: got.map((m) => m.lease_id) });
  await e.close(30000);
  assert.equal(e.counters().sent, 10);
  client.close();
});

// The routing rule for a shared tier agrees with the Rust client and docs/deploy.md.
import { test } from "node:test";
import assert from "node:assert/strict";
import { pick, score } from "../dist/index.js";

const THREE = ["hookd-0", "hookd-1", "hookd-2"];

test("the documented values", () => {
  assert.equal(score("hookd-0", "endpoint:orders"), 0x2e684a40d8f00d3cn);
  assert.equal(pick("queue:jobs", THREE), "hookd-0");
  assert.equal(pick("endpoint:orders", THREE), "hookd-2");
  assert.equal(pick("endpoint:x", []), undefined);
  // Names are hashed as their UTF-8 bytes.
  assert.equal(score("hookd-é", "queue:ü"), 0xd2b33749d7fb175fn);
});

test("order does not matter and removal moves only the removed replica's destinations", () => {
  const counts = Object.fromEntries(THREE.map((r) => [r, 0]));
  const reversed = [...THREE].reverse();
  for (let i = 0; i < 3000; i++) {
    const d = `endpoint:e${i}`;
    const p = pick(d, THREE);
    assert.equal(p, pick(d, reversed));
    counts[p]++;
    if (p !== "hookd-2") assert.equal(pick(d, THREE.slice(0, 2)), p, `${d} moved although its replica stayed`);
  }
  assert.ok(Object.values(counts).every((c) => c >= 800 && c < 1200), JSON.stringify(counts));
});

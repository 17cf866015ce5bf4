// GitHub's signing library (@octokit/webhooks-methods, npm) against hookd's ingest
// listener (issue #13): octokit signs, hookd accepts, deduplicates the redelivery by
// X-GitHub-Delivery, refuses a tampered body; octokit's verify agrees with hookd.
//
// Usage: node octokit.mjs INGEST_ADDR (hookd configured by tests/it/node.rs).
import { sign, verify } from "@octokit/webhooks-methods";

const SECRET = "octokit-test-secret";
const ingest = process.argv[2];

async function post(headers, body) {
  const r = await fetch(`http://${ingest}/in/github`, { method: "POST", headers, body });
  return [r.status, await r.json()];
}

function check(cond, what) {
  if (!cond) {
    console.error(`FAILED: ${what}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}

const body = JSON.stringify({ action: "opened", number: 7, repository: { full_name: "o/r" } });
const signature = await sign(SECRET, body);
check(signature.startsWith("sha256="), "octokit signs with sha256=");
check(await verify(SECRET, body, signature), "octokit verifies its own signature");
const headers = {
  "content-type": "application/json",
  "x-hub-signature-256": signature,
  "x-github-event": "pull_request",
  "x-github-delivery": "6f1a2c4e-0000-11ef-9a00-000000000001",
};
let [status, answer] = await post(headers, body);
check(status === 202 && answer.duplicate === false, `octokit-signed event: 202 ${JSON.stringify(answer)}`);
const id = answer.id;
[status, answer] = await post(headers, body);
check(status === 202 && answer.duplicate === true && answer.id === id, "redelivery: 202, duplicate, same id");
const tampered = body.replace("7", "8");
check(!(await verify(SECRET, tampered, signature)), "octokit refuses the tampered body");
[status] = await post({ ...headers, "x-github-delivery": "6f1a2c4e-0000-11ef-9a00-000000000002" }, tampered);
check(status === 401, "hookd refuses it too (401)");
const other = await sign("another-secret", body);
[status] = await post({ ...headers, "x-hub-signature-256": other, "x-github-delivery": "x-3" }, body);
check(status === 401, "signed with another secret: 401");
console.log("all ok");

// Which replica of a shared hookd tier holds a destination.
//
// Every replica keeps its own store, so all of a destination's events must reach the same
// replica. `pick` is rendezvous (highest random weight) hashing, the same rule as the Rust
// client's `hookd_client::route` and the Python package's `hookd_client.route`: each replica
// scores fmix64(FNV-1a 64(replica name, a zero byte, destination)) and the highest score
// wins; ties go to the name first in sort order. docs/deploy.md has the rule and check values.

const MASK = (1n << 64n) - 1n;
const FNV_OFFSET = 0xcbf29ce484222325n;
const FNV_PRIME = 0x100000001b3n;
const utf8 = new TextEncoder();

/** The score (an unsigned 64-bit integer) of `replica` for `destination`. */
export function score(replica: string, destination: string): bigint {
  let h = FNV_OFFSET;
  const feed = (bytes: Uint8Array) => {
    for (const b of bytes) h = ((h ^ BigInt(b)) * FNV_PRIME) & MASK;
  };
  feed(utf8.encode(replica));
  feed(Uint8Array.of(0));
  feed(utf8.encode(destination));
  // murmur3's 64-bit finaliser: FNV alone barely separates hookd-0 from hookd-1.
  h ^= h >> 33n;
  h = (h * 0xff51afd7ed558ccdn) & MASK;
  h ^= h >> 33n;
  h = (h * 0xc4ceb9fe1a85ec53n) & MASK;
  return h ^ (h >> 33n);
}

/**
 * The replica that holds `destination` (`endpoint:orders`, `queue:jobs`) among `replicas`
 * (`hookd-0.hookd.default.svc:7700`, ...); undefined when there is none.
 */
export function pick(destination: string, replicas: Iterable<string>): string | undefined {
  let best: { score: bigint; name: string } | undefined;
  for (const name of replicas) {
    const s = score(name, destination);
    if (!best || s > best.score || (s === best.score && name < best.name)) best = { score: s, name };
  }
  return best?.name;
}

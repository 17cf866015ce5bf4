//! Which replica of a shared hookd tier holds a destination.
//!
//! Every replica keeps its own store, so all of a destination's events must reach the same
//! replica: its breaker, rate limit, idempotency keys, dead letters and Stats live there.
//! [`pick`] is rendezvous (highest random weight) hashing: each replica scores
//! `fmix64(FNV-1a 64(replica name, a zero byte, destination))` (fmix64: murmur3's
//! finaliser) and the highest score wins. Adding a
//! replica moves only the destinations it now wins (about 1/n of them); removing one moves
//! only its own. The rule is simple to write in any language; `docs/deploy.md` has it with
//! test values.

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The score of `replica` for `destination`.
pub fn score(replica: &str, destination: &str) -> u64 {
    let mut h = FNV_OFFSET;
    for b in replica
        .bytes()
        .chain(std::iter::once(0))
        .chain(destination.bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    // FNV alone barely separates names that differ in their last byte (hookd-0, hookd-1):
    // murmur3's 64-bit finaliser mixes every bit into every other.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The replica that holds `destination` (e.g. `endpoint:orders`, `queue:jobs`), among
/// `replicas` (e.g. `hookd-0.hookd.default.svc:7700`, ...); `None` when there is none. Ties
/// go to the first name in sort order, so every client agrees whatever its list's order.
pub fn pick<'a, S: AsRef<str>>(destination: &str, replicas: &'a [S]) -> Option<&'a str> {
    replicas
        .iter()
        .map(|r| (score(r.as_ref(), destination), r.as_ref()))
        .max_by(|(sa, a), (sb, b)| sa.cmp(sb).then_with(|| b.cmp(a)))
        .map(|(_, r)| r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_values() {
        // docs/deploy.md quotes these, for other languages to check against.
        assert_eq!(score("hookd-0", "endpoint:orders"), 0x2e68_4a40_d8f0_0d3c);
        assert_eq!(
            pick("queue:jobs", &["hookd-0", "hookd-1", "hookd-2"]),
            Some("hookd-0")
        );
        let replicas = ["hookd-0", "hookd-1", "hookd-2"];
        assert_eq!(pick("endpoint:orders", &replicas), Some("hookd-2"));
        // Names are hashed as their UTF-8 bytes.
        assert_eq!(score("hookd-é", "queue:ü"), 0xd2b3_3749_d7fb_175f);
    }

    #[test]
    fn order_of_the_list_does_not_matter_and_removal_moves_only_the_removed() {
        let three = ["hookd-0", "hookd-1", "hookd-2"];
        let reversed = ["hookd-2", "hookd-1", "hookd-0"];
        let two = ["hookd-0", "hookd-1"];
        let mut counts = [0usize; 3];
        for i in 0..3_000 {
            let d = format!("endpoint:e{i}");
            let p = pick(&d, &three).unwrap();
            assert_eq!(Some(p), pick(&d, &reversed));
            counts[three.iter().position(|r| *r == p).unwrap()] += 1;
            if p != "hookd-2" {
                assert_eq!(
                    pick(&d, &two),
                    Some(p),
                    "{d} moved although its replica stayed"
                );
            }
        }
        // Spread: each replica holds about a third.
        assert!(
            counts.iter().all(|c| (800..1_200).contains(c)),
            "{counts:?}"
        );
        assert_eq!(pick::<&str>("endpoint:x", &[]), None);
    }
}

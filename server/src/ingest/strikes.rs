//! Failed authentications per client and source (issue #26): a sender that keeps failing a
//! source's signature check is refused before its bodies are read.
//!
//! Every 401 (a bad or missing signature, credentials a `none` source does not know, a
//! timestamp outside the tolerance) and every signature header over the candidate limit
//! counts one strike against the pair (client, source). A client is an IPv4 address, or an
//! IPv6 /64 (one host is handed a whole /64, so its addresses are one sender). Once a pair
//! has `connections.max_ingest_auth_failures` strikes within
//! `connections.ingest_auth_failure_window_secs` of its first, that client's requests to
//! that source are answered 429 with `Retry-After` (the rest of the window) from their
//! headers alone, and the connection is closed: the body is neither read nor hashed. A
//! delivery that passes the check clears its pair's strikes.
//!
//! What it costs: a flood of unsigned 1 MiB bodies from one address gets that many bodies
//! read and hashed per window and no more, whatever it sends. What it does not do: a
//! provider whose secret is wrong is refused for a window at a time (its deliveries fail
//! either way, and providers retry); a sender spread over many addresses is held only by
//! the unverified-byte budget and the connection caps. The pairs tracked are bounded
//! ([`MAX_TRACKED`]); past that, new pairs are not tracked until old windows end.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Pairs (client, source) tracked at once: about 100 bytes each.
pub(crate) const MAX_TRACKED: usize = 100_000;

/// A client that passed a check is trusted (its connections served with gRPC's, at normal
/// priority) for an hour after; at most [`MAX_TRACKED`] clients at once.
pub const TRUSTED_FOR_MS: u64 = 3_600_000;

/// The strikes of one pair in its window.
#[derive(Debug, Clone, Copy)]
struct Window {
    /// When the window began (the pair's first strike in it), clock milliseconds.
    since_ms: u64,
    strikes: u32,
}

impl Window {
    fn ends(&self, window_ms: u64) -> u64 {
        self.since_ms.saturating_add(window_ms)
    }
}

/// Whole seconds from `now_ms` until `ends_ms`, at least 1 (a `Retry-After`).
fn secs_until(ends_ms: u64, now_ms: u64) -> u64 {
    ends_ms.saturating_sub(now_ms).div_ceil(1000).max(1)
}

/// The strike counts in force. `max == 0` turns it off.
#[derive(Debug)]
pub struct Strikes {
    max: u32,
    window_ms: u64,
    capacity: usize,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    pairs: HashMap<(IpAddr, String), Window>,
    /// When ended windows were last swept out (at most once per window).
    swept_ms: u64,
    /// Clients whose last check (at any source) failed, or that were refused for their
    /// share: suspect for the window after ([`Strikes::suspect`]).
    failing: Moments,
    /// Clients that passed a check: trusted for [`TRUSTED_FOR_MS`] after.
    passed: Moments,
}

/// When each client last did something (clock ms), remembered for `keep_ms`. At most
/// `capacity` clients: when full, ended entries are swept out at most once per
/// `sweep_every_ms`, and a new client is not noted until there is room.
#[derive(Debug)]
struct Moments {
    at: HashMap<IpAddr, u64>,
    keep_ms: u64,
    sweep_every_ms: u64,
    swept_ms: u64,
}

impl Moments {
    fn new(keep_ms: u64, sweep_every_ms: u64) -> Self {
        Self {
            at: HashMap::new(),
            keep_ms,
            sweep_every_ms,
            swept_ms: 0,
        }
    }

    fn note(&mut self, client: IpAddr, now_ms: u64, capacity: usize) {
        if self.at.len() >= capacity && !self.at.contains_key(&client) {
            if now_ms.saturating_sub(self.swept_ms) < self.sweep_every_ms {
                return;
            }
            self.swept_ms = now_ms;
            let keep_ms = self.keep_ms;
            self.at.retain(|_, at| now_ms < at.saturating_add(keep_ms));
            if self.at.len() >= capacity {
                return;
            }
        }
        self.at.insert(client, now_ms);
    }

    fn within(&self, client: IpAddr, now_ms: u64) -> bool {
        self.at
            .get(&client)
            .is_some_and(|at| now_ms < at.saturating_add(self.keep_ms))
    }

    fn forget(&mut self, client: IpAddr) {
        if !self.at.is_empty() {
            self.at.remove(&client);
        }
    }
}

/// The client an address belongs to: IPv4 as is, IPv6 by its /64.
fn client(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

/// A strike that completed a pair's allowance: the caller logs it once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tripped {
    /// Seconds until the pair is let in again.
    pub(crate) retry_after_secs: u64,
}

impl Strikes {
    pub fn new(max: u32, window_secs: u64) -> Self {
        Self::with_capacity(max, window_secs, MAX_TRACKED)
    }

    fn with_capacity(max: u32, window_secs: u64, capacity: usize) -> Self {
        let window_ms = window_secs.saturating_mul(1000).max(1);
        Self {
            max,
            window_ms,
            capacity,
            state: Mutex::new(State {
                pairs: HashMap::new(),
                swept_ms: 0,
                failing: Moments::new(window_ms, window_ms),
                passed: Moments::new(TRUSTED_FOR_MS, window_ms),
            }),
        }
    }

    /// Whether failed authentications are counted at all (`max_ingest_auth_failures > 0`).
    pub fn enabled(&self) -> bool {
        self.max > 0
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Seconds `ip` must wait before `source` reads its next body, or `None` if it may
    /// send now.
    pub fn refused(&self, ip: IpAddr, source: &str, now_ms: u64) -> Option<u64> {
        if self.max == 0 {
            return None;
        }
        let mut state = self.state();
        if state.pairs.is_empty() {
            return None;
        }
        let key = (client(ip), source.to_owned());
        let w = *state.pairs.get(&key)?;
        let ends = w.ends(self.window_ms);
        if now_ms >= ends {
            state.pairs.remove(&key);
            return None;
        }
        (w.strikes >= self.max).then(|| secs_until(ends, now_ms))
    }

    /// One failed authentication of `ip` at `source`: `Some` when this one reached the
    /// allowance.
    pub(crate) fn strike(&self, ip: IpAddr, source: &str, now_ms: u64) -> Option<Tripped> {
        if self.max == 0 {
            return None;
        }
        let key = (client(ip), source.to_owned());
        let window_ms = self.window_ms;
        let mut state = self.state();
        state.failing.note(key.0, now_ms, self.capacity);
        if !state.pairs.contains_key(&key) && state.pairs.len() >= self.capacity {
            if now_ms.saturating_sub(state.swept_ms) < window_ms {
                return None;
            }
            state.swept_ms = now_ms;
            state.pairs.retain(|_, w| now_ms < w.ends(window_ms));
            if state.pairs.len() >= self.capacity {
                return None;
            }
        }
        let w = state.pairs.entry(key).or_insert(Window {
            since_ms: now_ms,
            strikes: 0,
        });
        if now_ms >= w.ends(window_ms) {
            *w = Window {
                since_ms: now_ms,
                strikes: 0,
            };
        }
        w.strikes = w.strikes.saturating_add(1);
        (w.strikes == self.max).then(|| Tripped {
            retry_after_secs: secs_until(w.ends(window_ms), now_ms),
        })
    }

    /// A delivery from `ip` passed `source`'s check at `now_ms`: its strikes are forgotten
    /// and its client is trusted.
    pub fn cleared(&self, ip: IpAddr, source: &str, now_ms: u64) {
        if self.max == 0 {
            return;
        }
        let key = client(ip);
        let mut state = self.state();
        if !state.pairs.is_empty() {
            state.pairs.remove(&(key, source.to_owned()));
        }
        state.failing.forget(key);
        state.passed.note(key, now_ms, self.capacity);
    }

    /// `ip`'s client was refused for holding its whole share of the unverified budget:
    /// suspect, as after a failed check (it is not a strike).
    pub(crate) fn suspected(&self, ip: IpAddr, now_ms: u64) {
        if self.max == 0 {
            return;
        }
        self.state().failing.note(client(ip), now_ms, self.capacity);
    }

    /// Whether `ip`'s client is not trusted: it passed no check in the last
    /// [`TRUSTED_FOR_MS`], or since then failed one (at any source) or was refused for
    /// holding its share of the unverified budget, within the window. The ingest listener
    /// serves its new connections on the low-priority runtime (`ingest/demote.rs`), so a
    /// flood of them, even its first wave, waits behind the known providers' requests and
    /// gRPC instead of ahead of them.
    pub fn suspect(&self, ip: IpAddr, now_ms: u64) -> bool {
        if self.max == 0 {
            return false;
        }
        let key = client(ip);
        let state = self.state();
        state.failing.within(key, now_ms) || !state.passed.within(key, now_ms)
    }

    /// Pairs tracked now.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.state().pairs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(203, 0, 113, 7));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(203, 0, 113, 8));

    #[test]
    fn the_allowance_refuses_for_the_rest_of_the_window_then_lets_in_again() {
        let s = Strikes::new(3, 10);
        let t0 = 1_000_000;
        assert_eq!(s.strike(A, "shop", t0), None);
        assert_eq!(s.strike(A, "shop", t0 + 100), None);
        assert_eq!(s.refused(A, "shop", t0 + 200), None, "two of three");
        assert_eq!(
            s.strike(A, "shop", t0 + 2_500),
            Some(Tripped {
                retry_after_secs: 8
            })
        );
        assert_eq!(s.refused(A, "shop", t0 + 2_600), Some(8));
        assert_eq!(s.refused(A, "shop", t0 + 9_999), Some(1));
        // Other sources and other clients are not held.
        assert_eq!(s.refused(A, "other", t0 + 2_600), None);
        assert_eq!(s.refused(B, "shop", t0 + 2_600), None);
        // The window ends: in again, with a fresh allowance.
        assert_eq!(s.refused(A, "shop", t0 + 10_000), None);
        assert_eq!(s.tracked(), 0);
        assert_eq!(s.strike(A, "shop", t0 + 10_001), None);
        assert_eq!(s.refused(A, "shop", t0 + 10_002), None);
    }

    #[test]
    fn a_passed_check_clears_and_zero_turns_it_off() {
        let s = Strikes::new(2, 10);
        assert_eq!(s.strike(A, "shop", 0), None);
        s.cleared(A, "shop", 0);
        assert_eq!(s.strike(A, "shop", 1), None);
        assert_eq!(s.refused(A, "shop", 2), None);
        let off = Strikes::new(0, 10);
        for t in 0..100 {
            assert_eq!(off.strike(A, "shop", t), None);
        }
        assert_eq!(off.refused(A, "shop", 100), None);
        assert_eq!(off.tracked(), 0);
    }

    #[test]
    fn a_client_is_trusted_after_a_pass_until_it_fails_or_an_hour_passes() {
        let strikes = Strikes::new(32, 10);
        let ip: IpAddr = [10, 0, 0, 1].into();
        assert!(strikes.suspect(ip, 1_000), "never seen: not trusted");
        strikes.cleared(ip, "a", 1_000);
        assert!(!strikes.suspect(ip, 1_000), "passed a check");
        strikes.strike(ip, "a", 1_000);
        assert!(strikes.suspect(ip, 1_000), "at any source");
        assert!(strikes.suspect(ip, 10_999));
        assert!(
            !strikes.suspect(ip, 11_000),
            "the window ended, trusted still"
        );
        assert!(
            strikes.suspect([10, 0, 0, 2].into(), 1_000),
            "another client, never seen"
        );
        assert!(
            strikes.suspect(ip, 1_000 + TRUSTED_FOR_MS),
            "the trust ran out"
        );
        strikes.strike(ip, "a", 20_000);
        strikes.cleared(ip, "b", 20_000);
        assert!(
            !strikes.suspect(ip, 20_000),
            "a passed check, even at another source"
        );
        strikes.suspected(ip, 30_000);
        assert!(strikes.suspect(ip, 30_000), "over its share");
        assert_eq!(
            strikes.refused(ip, "a", 30_000),
            None,
            "which is not a strike"
        );
        let off = Strikes::new(0, 10);
        off.strike(ip, "a", 1_000);
        assert!(!off.suspect(ip, 1_000), "off");
        assert!(!off.suspect([10, 0, 0, 3].into(), 1_000), "off, never seen");
    }

    #[test]
    fn ipv6_counts_by_slash_64_and_mapped_ipv4_as_ipv4() {
        let s = Strikes::new(2, 10);
        let one: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let same_64: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other_64: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(s.strike(one, "shop", 0), None);
        assert!(s.strike(same_64, "shop", 1).is_some());
        assert!(s.refused(one, "shop", 2).is_some());
        assert_eq!(s.refused(other_64, "shop", 2), None);
        let mapped: IpAddr = "::ffff:203.0.113.7".parse().unwrap();
        assert_eq!(s.strike(mapped, "x", 0), None);
        assert!(s.strike(A, "x", 1).is_some());
    }

    #[test]
    fn the_pairs_tracked_are_bounded_and_ended_windows_make_room() {
        let s = Strikes::with_capacity(2, 10, 3);
        let ip = |n: u8| IpAddr::V4(std::net::Ipv4Addr::new(198, 51, 100, n));
        for n in 0..3 {
            assert_eq!(s.strike(ip(n), "shop", 0), None);
        }
        // Full: a new pair is not tracked while every window is open...
        assert_eq!(s.strike(ip(9), "shop", 5_000), None);
        assert_eq!(s.strike(ip(9), "shop", 5_001), None);
        assert_eq!(s.refused(ip(9), "shop", 5_002), None);
        assert_eq!(s.tracked(), 3);
        // ...and is once they have ended.
        assert_eq!(s.strike(ip(9), "shop", 10_000), None);
        assert!(s.strike(ip(9), "shop", 10_001).is_some());
        assert_eq!(s.tracked(), 1);
    }
}

//! Console sessions: a random id in an `HttpOnly`, `SameSite=Strict` cookie (`Secure`
//! under TLS), held in memory (a restart logs everyone out), each with its own CSRF token.
//!
//! The id is kept only as its SHA-256, so the table does not hold what a browser presents.
//! A session ends after `IDLE_MS` without a request, after `MAX_AGE_MS` in any case, at
//! logout, when its caller opens more than `MAX_SESSIONS_PER_CALLER` (its own oldest goes,
//! never another caller's), or when `MAX_SESSIONS` newer ones push it out.
//!
//! The login form's nonce is bound to this process: the cookie holds a random value and the
//! form its HMAC under a key only hookd knows, so a cookie planted by another service on the
//! same host (cookies ignore ports) cannot be paired with a form. Failed logins are limited
//! per client address and in all ([`LoginLimiter`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::auth::{Principal, random_token};
use hookd_core::clock::Clock;

pub const COOKIE: &str = "hookd_session";
/// The login form's double-submit nonce (a cookie and a hidden field that must match).
pub(crate) const LOGIN_COOKIE: &str = "hookd_login";
pub(crate) const IDLE_MS: u64 = 30 * 60 * 1_000;
pub(crate) const MAX_AGE_MS: u64 = 12 * 3_600 * 1_000;
pub(crate) const MAX_SESSIONS: usize = 1_024;
/// Sessions one caller (one token, or certificate) holds at once.
pub(crate) const MAX_SESSIONS_PER_CALLER: usize = 32;
/// Failed logins allowed per client address (an IPv6 address by its /64) per
/// `LOGIN_WINDOW_MS`. There is no limit in all: it would let anyone lock every operator
/// out (finding 4 of issue #49); a token is at least 16 characters, so guessing from many
/// addresses gains nothing.
pub(crate) const MAX_FAILED_LOGINS_PER_PEER: u32 = 10;
pub(crate) const LOGIN_WINDOW_MS: u64 = 60_000;

/// A logged-in browser, as handlers see it.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub caller: Arc<Principal>,
    /// The tenant the pages show and the actions act on (an operator switches it in the
    /// header; `default` at first): shared by the session's clones.
    pub tenant: Arc<Mutex<Viewed>>,
    /// The caller presented a credential. Without `[auth]` every loopback visitor is
    /// let in as `anonymous`: there is nothing to log out of.
    pub signed_in: bool,
    /// Every form carries it; every POST must present it.
    pub csrf: String,
    /// A portal link's view (issue #52): one tenant, pinned, under the link's base path.
    pub portal: Option<Arc<PortalView>>,
}

/// What a portal page needs of its link beyond the caller.
#[derive(Debug)]
pub(crate) struct PortalView {
    pub link: crate::portal_links::Link,
    /// The heading (the tenant's portal title, or its display name, or its name).
    pub title: String,
    /// An https image beside the heading, or empty.
    pub logo_url: String,
}

/// The tenant a session views.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Viewed {
    pub id: hookd_core::scope::TenantId,
    pub name: String,
}

impl Default for Viewed {
    fn default() -> Self {
        Self {
            id: hookd_core::scope::TenantId::DEFAULT,
            name: hookd_core::scope::DEFAULT_TENANT.to_owned(),
        }
    }
}

impl Session {
    /// The tenant it views.
    pub(crate) fn viewed(&self) -> Viewed {
        self.tenant
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn tenant(&self) -> hookd_core::scope::TenantId {
        self.viewed().id
    }

    /// Whose figures the overview and destinations show: every tenant's under `default`
    /// (an operator's whole hookd, as before tenants), else the viewed tenant's.
    pub(crate) fn figures(&self) -> Option<hookd_core::scope::TenantId> {
        let id = self.tenant();
        (!id.is_default() || self.portal.is_some()).then_some(id)
    }

    /// Whether the caller may change things (an operator; a portal link with `admin`):
    /// pages show their forms only then.
    pub(crate) fn may_change(&self) -> bool {
        self.caller.may(crate::auth::Scope::Admin)
    }

    /// Whether the caller may see destination `key` (as its tenant reads it:
    /// `endpoint:NAME`): a portal link or token limited to destinations sees only those.
    pub(crate) fn may_see(&self, key: &str) -> bool {
        self.caller.may_use(key)
    }

    pub(crate) fn view(&self, viewed: Viewed) {
        *self.tenant.lock().unwrap_or_else(|p| p.into_inner()) = viewed;
    }
}

#[derive(Debug)]
struct Entry {
    session: Session,
    created_ms: u64,
    seen_ms: u64,
}

#[derive(Debug)]
pub(crate) struct Sessions {
    table: Mutex<HashMap<[u8; 32], Entry>>,
    clock: Arc<dyn Clock>,
}

impl Sessions {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            table: Mutex::new(HashMap::new()),
            clock,
        }
    }

    /// A new session for `caller` (`signed_in`: it presented a credential): its cookie
    /// value and the session.
    pub(crate) fn create(&self, caller: Arc<Principal>, signed_in: bool) -> (String, Session) {
        let id = random_token();
        let session = Session {
            caller,
            tenant: Arc::default(),
            signed_in,
            csrf: random_token(),
            portal: None,
        };
        let now = self.clock.now_ms();
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table.retain(|_, e| live(e, now));
        // A caller's sessions push out only its own (a script sending its token with every
        // GET must not log everyone else out).
        let mine: Vec<([u8; 32], u64)> = table
            .iter()
            .filter(|(_, e)| e.session.caller.name == session.caller.name)
            .map(|(k, e)| (*k, e.seen_ms))
            .collect();
        if mine.len() >= MAX_SESSIONS_PER_CALLER
            && let Some((oldest, _)) = mine.iter().min_by_key(|(_, seen)| *seen)
        {
            table.remove(oldest);
        }
        if table.len() >= MAX_SESSIONS
            && let Some(oldest) = table.iter().min_by_key(|(_, e)| e.seen_ms).map(|(k, _)| *k)
        {
            table.remove(&oldest);
        }
        table.insert(
            digest(&id),
            Entry {
                session: session.clone(),
                created_ms: now,
                seen_ms: now,
            },
        );
        (id, session)
    }

    /// The session a cookie value names, if it is live (and marks it used).
    pub(crate) fn get(&self, id: &str) -> Option<Session> {
        let now = self.clock.now_ms();
        let key = digest(id);
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let entry = table.get_mut(&key)?;
        if !live(entry, now) {
            table.remove(&key);
            return None;
        }
        entry.seen_ms = now;
        Some(entry.session.clone())
    }

    pub(crate) fn remove(&self, id: &str) {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table.remove(&digest(id));
    }
}

/// The login form's nonce for a login cookie value: its HMAC-SHA256 under `key`, in hex.
pub(crate) fn login_nonce(key: &[u8; 32], cookie: &str) -> String {
    use hmac::{KeyInit, Mac};
    let Ok(mut mac) = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(key) else {
        return String::new();
    };
    mac.update(cookie.as_bytes());
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Failed console logins per client address, over a fixed window. Only an address's own
/// failures ever refuse it: a correct credential from anywhere else is never refused by
/// them.
#[derive(Debug)]
pub(crate) struct LoginLimiter {
    clock: Arc<dyn Clock>,
    state: Mutex<LoginWindow>,
}

#[derive(Debug, Default)]
struct LoginWindow {
    start_ms: u64,
    /// Failures in the window, from every address (what the log reports).
    total: u32,
    /// At most `MAX_TRACKED_PEERS` addresses; the failures of any others are only in the
    /// total (they are not refused: that would refuse an operator for others' failures).
    peers: HashMap<std::net::IpAddr, u32>,
}

const MAX_TRACKED_PEERS: usize = 65_536;

/// The address an IPv6 client is limited by: its /64, what one host is usually given.
fn peer_group(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.into(),
            None => {
                let mut octets = v6.octets();
                octets[8..].fill(0);
                std::net::Ipv6Addr::from(octets).into()
            }
        },
        v4 => v4,
    }
}

impl LoginLimiter {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            state: Mutex::default(),
        }
    }

    fn window(&self) -> std::sync::MutexGuard<'_, LoginWindow> {
        let now = self.clock.now_ms();
        let mut w = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if now.saturating_sub(w.start_ms) >= LOGIN_WINDOW_MS {
            *w = LoginWindow {
                start_ms: now,
                ..LoginWindow::default()
            };
        }
        w
    }

    /// Whether `peer` may try to log in now (its own failures in the window are under
    /// the limit).
    pub(crate) fn allowed(&self, peer: Option<std::net::IpAddr>) -> bool {
        let w = self.window();
        peer.is_none_or(|p| {
            w.peers.get(&peer_group(p)).copied().unwrap_or(0) < MAX_FAILED_LOGINS_PER_PEER
        })
    }

    /// Counts a failed login from `peer`; answers the window's failures from everyone.
    pub(crate) fn failed(&self, peer: Option<std::net::IpAddr>) -> u32 {
        let mut w = self.window();
        w.total = w.total.saturating_add(1);
        if let Some(p) = peer.map(peer_group)
            && (w.peers.len() < MAX_TRACKED_PEERS || w.peers.contains_key(&p))
        {
            *w.peers.entry(p).or_default() += 1;
        }
        w.total
    }
}

fn live(e: &Entry, now: u64) -> bool {
    now.saturating_sub(e.seen_ms) < IDLE_MS && now.saturating_sub(e.created_ms) < MAX_AGE_MS
}

fn digest(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

/// Whether a presented token is the expected one (constant time; an empty one never is).
pub(crate) fn same_token(presented: &str, expected: &str) -> bool {
    !presented.is_empty() && bool::from(presented.as_bytes().ct_eq(expected.as_bytes()))
}

/// The value of cookie `name` in a request's `Cookie` headers.
pub fn cookie<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// A `Set-Cookie` value for the console's cookies (path `/ui`); `max_age_secs = 0` deletes.
pub(crate) fn set_cookie(name: &str, value: &str, secure: bool, max_age_secs: u64) -> String {
    format!(
        "{name}={value}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={max_age_secs}{}",
        if secure { "; Secure" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookd_core::clock::ManualClock;

    fn principal() -> Arc<Principal> {
        let auth = crate::auth::Authenticator::new(
            &crate::auth::AuthConfig::default(),
            Arc::new(ManualClock::new(0)),
            &|_| None,
        )
        .unwrap();
        auth.check(crate::auth::Access::Open, None, None).unwrap()
    }

    #[test]
    fn sessions_expire_when_idle_and_when_old() {
        let clock = Arc::new(ManualClock::new(1_000));
        let sessions = Sessions::new(clock.clone());
        let (id, s) = sessions.create(principal(), true);
        assert_eq!(sessions.get(&id).unwrap().csrf, s.csrf);
        assert!(sessions.get("not-a-session").is_none());
        clock.advance(IDLE_MS - 1);
        assert!(sessions.get(&id).is_some(), "used within the idle time");
        clock.advance(IDLE_MS);
        assert!(sessions.get(&id).is_none(), "idle too long");

        let (id, _) = sessions.create(principal(), true);
        for _ in 0..(MAX_AGE_MS / (IDLE_MS / 2)) {
            clock.advance(IDLE_MS / 2);
            sessions.get(&id);
        }
        assert!(sessions.get(&id).is_none(), "older than the maximum age");
    }

    #[test]
    fn logout_ends_a_session_and_the_table_is_bounded() {
        let clock = Arc::new(ManualClock::new(0));
        let sessions = Sessions::new(clock.clone());
        let (first, _) = sessions.create(principal(), true);
        clock.advance(1);
        let (second, _) = sessions.create(principal(), true);
        sessions.remove(&second);
        assert!(sessions.get(&second).is_none());
        for _ in 0..MAX_SESSIONS {
            clock.advance(1);
            sessions.create(principal(), true);
        }
        assert!(
            sessions.get(&first).is_none(),
            "the least recently used goes"
        );
        assert!(sessions.table.lock().unwrap().len() <= MAX_SESSIONS);
    }

    #[test]
    fn one_callers_sessions_push_out_only_its_own() {
        let clock = Arc::new(ManualClock::new(0));
        let sessions = Sessions::new(clock.clone());
        let (ops, _) = sessions.create(Principal::named("ops"), true);
        // The finding: 1,030 bearer GETs of one token evicted every session.
        let mut bots = Vec::new();
        for _ in 0..1_030 {
            clock.advance(1);
            bots.push(sessions.create(Principal::named("bot"), true).0);
        }
        assert!(
            sessions.get(&ops).is_some(),
            "another caller's session survives"
        );
        let live = bots.iter().filter(|b| sessions.get(b).is_some()).count();
        assert_eq!(live, MAX_SESSIONS_PER_CALLER);
        assert!(
            sessions.get(bots.last().unwrap()).is_some(),
            "the newest are kept"
        );
    }

    #[test]
    fn failed_logins_are_limited_per_address_and_never_in_all() {
        let clock = Arc::new(ManualClock::new(0));
        let limiter = LoginLimiter::new(clock.clone());
        let a = Some(std::net::IpAddr::from([10, 0, 0, 1]));
        for _ in 0..MAX_FAILED_LOGINS_PER_PEER {
            assert!(limiter.allowed(a));
            limiter.failed(a);
        }
        assert!(!limiter.allowed(a), "this address is over its limit");
        assert!(
            limiter.allowed(Some([10, 0, 0, 2].into())),
            "another is not"
        );
        // 110 failures from 11 addresses (the reported lockout) and 50,000 from as many
        // more: every other address may still log in.
        for n in 0..50_000_u32 {
            let [_, b, c, d] = n.to_be_bytes();
            limiter.failed(Some([11, b, c, d].into()));
        }
        assert!(
            limiter.allowed(Some([10, 0, 0, 3].into())),
            "others' failures never refuse an address"
        );
        // An IPv6 client is limited by its /64 (and a v4-mapped one as its v4 address).
        let v6 = |last: u16| Some(std::net::IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, last]));
        for n in 0..MAX_FAILED_LOGINS_PER_PEER {
            limiter.failed(v6(n as u16));
        }
        assert!(!limiter.allowed(v6(9_999)), "the same /64");
        assert!(limiter.allowed(Some(std::net::IpAddr::from([
            0x2001, 0xdb8, 0, 2, 0, 0, 0, 1
        ]))));
        let mapped = std::net::Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped();
        assert!(!limiter.allowed(Some(mapped.into())), "a v4-mapped address");
        clock.advance(LOGIN_WINDOW_MS);
        assert!(limiter.allowed(a), "a new window");
    }

    #[test]
    fn a_login_nonce_needs_hookds_key() {
        let key = [7u8; 32];
        let cookie = random_token();
        let nonce = login_nonce(&key, &cookie);
        assert!(same_token(&nonce, &login_nonce(&key, &cookie)));
        // A planted cookie and a form made for it without the key: no match.
        assert!(!same_token(&cookie, &login_nonce(&key, &cookie)));
        assert!(!same_token(&nonce, &login_nonce(&[8u8; 32], &cookie)));
    }

    #[test]
    fn tokens_compare_exactly_and_never_empty() {
        let t = random_token();
        assert!(same_token(&t, &t));
        assert!(!same_token("", ""));
        assert!(!same_token(&t[..10], &t));
        assert_ne!(random_token(), t);
    }

    #[test]
    fn cookies_are_found_among_others_and_set_strictly() {
        let mut h = http::HeaderMap::new();
        h.append(
            http::header::COOKIE,
            "a=1; hookd_session=abc".parse().unwrap(),
        );
        h.append(http::header::COOKIE, "b=2".parse().unwrap());
        assert_eq!(cookie(&h, COOKIE), Some("abc"));
        assert_eq!(cookie(&h, "b"), Some("2"));
        assert_eq!(cookie(&h, "c"), None);
        let c = set_cookie(COOKIE, "v", true, 60);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.ends_with("Secure"));
        assert!(!set_cookie(COOKIE, "v", false, 60).contains("Secure"));
    }
}

//! The destination guard (SSRF): which resolved addresses hookd may connect to.
//!
//! hookd is handed URLs by its clients; without a guard, a client could make hookd POST to
//! its own admin port, a cloud metadata service or anything on the private network. Every
//! address is checked *as it is dialed* (see `connect.rs`), after DNS resolution, so a name
//! that resolves to a public address when validated and a private one when used (DNS
//! rebinding) is still refused. IPv4-mapped, IPv4-compatible, NAT64 and 6to4 IPv6 addresses
//! are judged by the IPv4 address they carry. An allow-list of CIDRs, each optionally
//! limited to a port or a port range (`127.0.0.1/32:8080`, `10.0.0.0/8:8000-8999`), admits
//! addresses the operator trusts. hookd's own listeners are never a destination, allowed or
//! not. Every refusal reads the same to the client (the class and address go to the log
//! only), so the answers cannot be used to map the private network (finding F14).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;

/// Why an address was refused. The message is the same for every address and class.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", Refused::MESSAGE)]
pub struct Refused {
    pub addr: SocketAddr,
    pub class: &'static str,
}

impl Refused {
    /// What a refusal says (and what the dead-letter analysis recognises).
    pub(crate) const MESSAGE: &'static str = hookd_core::destination::REFUSED_ADDRESS;
}

/// One allow-list entry: a network, and the ports it admits (all without a range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllowRule {
    pub net: IpNet,
    pub ports: Option<(u16, u16)>,
}

impl AllowRule {
    fn admits(&self, ip: IpAddr, port: u16) -> bool {
        self.net.contains(&ip) && self.ports.is_none_or(|(lo, hi)| (lo..=hi).contains(&port))
    }
}

impl std::str::FromStr for AllowRule {
    type Err = String;

    /// `CIDR`, `CIDR:PORT` or `CIDR:LOW-HIGH` (the port after the prefix length, so IPv6
    /// reads `::1/128:8080`).
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            format!(
                "{s:?}: {why} (expected CIDR, CIDR:PORT or CIDR:LOW-HIGH, e.g. 127.0.0.1/32:8080)"
            )
        };
        let (addr, rest) = s.split_once('/').ok_or_else(|| bad("no /prefix length"))?;
        let (prefix, ports) = match rest.split_once(':') {
            Some((prefix, ports)) => (prefix, Some(ports)),
            None => (rest, None),
        };
        let net: IpNet = format!("{addr}/{prefix}")
            .parse()
            .map_err(|_| bad("not a network"))?;
        let ports = match ports {
            None => None,
            Some(p) => {
                let (lo, hi) = p.split_once('-').unwrap_or((p, p));
                let lo: u16 = lo.parse().map_err(|_| bad("bad port"))?;
                let hi: u16 = hi.parse().map_err(|_| bad("bad port"))?;
                if lo == 0 || hi < lo {
                    return Err(bad("bad port range"));
                }
                Some((lo, hi))
            }
        };
        Ok(Self { net, ports })
    }
}

impl std::fmt::Display for AllowRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ports {
            None => write!(f, "{}", self.net),
            Some((lo, hi)) if lo == hi => write!(f, "{}:{lo}", self.net),
            Some((lo, hi)) => write!(f, "{}:{lo}-{hi}", self.net),
        }
    }
}

impl<'de> serde::Deserialize<'de> for AllowRule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// As written in the config (`hookd config`): the same text it was parsed from.
impl serde::Serialize for AllowRule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The class of a refusal of hookd's own listener (no allow rule admits it).
pub const OWN_LISTENER: &str = "hookd's own listener";

#[derive(Debug, Clone, Default)]
pub struct AddressGuard {
    allow: Vec<AllowRule>,
    /// hookd's own listeners.
    own: Vec<SocketAddr>,
}

impl AddressGuard {
    pub fn new(allow: Vec<AllowRule>) -> Self {
        Self {
            allow,
            own: Vec::new(),
        }
    }

    /// Also refuses these addresses (hookd's listeners; an unspecified address stands for
    /// every local one, of which loopback is what can be told here).
    pub fn with_own(mut self, own: Vec<SocketAddr>) -> Self {
        self.own = own;
        self
    }

    /// Whether `addr` is one of hookd's own listeners.
    fn is_own(&self, addr: SocketAddr) -> bool {
        let ip = addr.ip();
        let port = addr.port();
        // An IPv4 address written as IPv6 is judged as the IPv4 address.
        let embedded = match ip {
            IpAddr::V6(v6) => embedded_v4(v6).map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        self.own.iter().any(|own| {
            own.port() == port
                && [Some(ip), embedded].into_iter().flatten().any(|ip| {
                    ip == own.ip()
                        || (own.ip().is_unspecified() && ip.is_loopback())
                        || (own.ip().is_loopback() && ip.is_loopback())
                        || ip.is_unspecified()
                })
        })
    }

    /// Through a proxy the proxy resolves and dials the endpoint's host, so hookd judges
    /// only what it can tell from the name: an IP address, or `localhost`, at the port of
    /// one of its own listeners is refused before the tunnel is asked for (a proxy on this
    /// host would otherwise reach them). Other names are the proxy's to resolve.
    pub fn check_proxied(&self, host: &str, port: u16) -> Result<(), Refused> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let lower = host.to_ascii_lowercase();
        let addrs: Vec<IpAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) if lower == "localhost" || lower.ends_with(".localhost") => vec![
                IpAddr::from([127, 0, 0, 1]),
                IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
            ],
            Err(_) => return Ok(()),
        };
        for ip in addrs {
            let addr = SocketAddr::new(ip, port);
            if self.is_own(addr) {
                return Err(Refused {
                    addr,
                    class: OWN_LISTENER,
                });
            }
        }
        Ok(())
    }

    /// Ok if `addr` is public or allow-listed, and not hookd itself.
    pub fn check(&self, addr: SocketAddr) -> Result<(), Refused> {
        let ip = addr.ip();
        let port = addr.port();
        // An IPv4 address written as IPv6 is judged as the IPv4 address.
        let embedded = match ip {
            IpAddr::V6(v6) => embedded_v4(v6).map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        if self.is_own(addr) {
            return Err(Refused {
                addr,
                class: OWN_LISTENER,
            });
        }
        let allowed = [Some(ip), embedded]
            .into_iter()
            .flatten()
            .any(|ip| self.allow.iter().any(|rule| rule.admits(ip, port)));
        if allowed {
            return Ok(());
        }
        match special(ip) {
            Some(class) => Err(Refused { addr, class }),
            None => Ok(()),
        }
    }
}

/// The IPv4 address an IPv6 address stands for, if it is one of the embedding forms.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        // ::ffff:a.b.c.d (mapped)
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(tail),
        // ::ffff:0:a.b.c.d (IPv4-translated, RFC 2765)
        [0, 0, 0, 0, 0xffff, 0, _, _] => Some(tail),
        // ::a.b.c.d (compatible, deprecated; :: and ::1 are handled as IPv6)
        [0, 0, 0, 0, 0, 0, hi, _] if hi != 0 => Some(tail),
        // 64:ff9b::a.b.c.d (NAT64 well-known prefix)
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(tail),
        // 2002:AABB:CCDD::/48 (6to4)
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

/// The class of a non-public address, or `None` for a public one.
fn special(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => special_v4(v4),
            None => special_v6(v6),
        },
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        _ if ip.is_unspecified() => "unspecified",
        (0, _, _) => "in 0.0.0.0/8 (this network)",
        (127, _, _) => "loopback",
        (10, _, _) | (192, 168, _) => "private",
        (172, b, _) if (16..=31).contains(&b) => "private",
        (169, 254, _) => "link-local",
        (100, b, _) if (64..=127).contains(&b) => "shared address space (CGNAT)",
        (192, 0, 0) => "IETF protocol assignment",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (198, 18 | 19, _) => "benchmarking",
        _ if ip.is_multicast() => "multicast",
        _ if ip.is_broadcast() => "broadcast",
        (240..=255, _, _) => "reserved",
        _ => return None,
    })
}

fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    Some(match s[0] {
        _ if ip.is_unspecified() => "unspecified",
        _ if ip.is_loopback() => "loopback",
        0xfe80..=0xfebf => "link-local",
        0xfec0..=0xfeff => "site-local",
        0xfc00..=0xfdff => "unique local (private)",
        0xff00..=0xffff => "multicast",
        0x0100 if s[1..4] == [0, 0, 0] => "discard-only",
        // Local-use NAT64 (RFC 8215): where the IPv4 address sits depends on the site's
        // prefix length, so it cannot be judged; refused.
        0x0064 if s[1] == 0xff9b && s[2] == 1 => "local-use NAT64",
        0x2001 if s[1] == 0x0db8 => "documentation",
        // Teredo carries an obfuscated IPv4 address; refuse rather than decode it.
        0x2001 if s[1] == 0 => "Teredo",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(guard: &AddressGuard, ip: &str) -> bool {
        let ip: IpAddr = ip.parse().unwrap();
        guard.check(SocketAddr::new(ip, 443)).is_err()
    }

    #[test]
    fn refuses_every_special_range_and_admits_public_ones() {
        let g = AddressGuard::default();
        for ip in [
            "127.0.0.1",
            "127.255.0.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "240.0.0.1",
            "198.18.0.1",
            "::",
            "::1",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
            "2001:db8::1",
            "2001:0:4136:e378::1",
            "::ffff:0:7f00:1",
            "::ffff:0:a00:1",
            "64:ff9b:1::a00:1",
            "64:ff9b:1::808:808",
        ] {
            assert!(refused(&g, ip), "{ip} should be refused");
        }
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert!(!refused(&g, ip), "{ip} should be admitted");
        }
    }

    #[test]
    fn allow_list_admits_exactly_its_networks_in_both_notations() {
        let g = AddressGuard::new(vec!["127.0.0.1/32".parse().unwrap()]);
        assert!(!refused(&g, "127.0.0.1"));
        assert!(!refused(&g, "::ffff:127.0.0.1"));
        assert!(refused(&g, "127.0.0.2"));
        assert!(refused(&g, "::1"));
        assert!(refused(&g, "10.0.0.1"));
        // Every refusal reads the same; the class is for the log.
        let err = g.check("10.0.0.1:80".parse().unwrap()).unwrap_err();
        assert_eq!(err.class, "private");
        let other = g.check("169.254.169.254:80".parse().unwrap()).unwrap_err();
        assert_eq!(err.to_string(), other.to_string());
        assert!(!err.to_string().contains("10.0.0.1"));
    }

    #[test]
    fn allow_rules_may_carry_ports_and_never_admit_hookd_itself() {
        let rules: Vec<AllowRule> = ["127.0.0.1/32:8080", "10.0.0.0/8:9000-9100", "::1/128"]
            .iter()
            .map(|r| r.parse().unwrap())
            .collect();
        assert_eq!(rules[1].to_string(), "10.0.0.0/8:9000-9100");
        let g = AddressGuard::new(rules).with_own(vec![
            "127.0.0.1:7700".parse().unwrap(),
            "0.0.0.0:7701".parse().unwrap(),
        ]);
        let ok = |a: &str| g.check(a.parse().unwrap()).is_ok();
        assert!(ok("127.0.0.1:8080"));
        assert!(!ok("127.0.0.1:8081"));
        assert!(ok("[::ffff:127.0.0.1]:8080"));
        assert!(ok("10.1.2.3:9050"));
        assert!(!ok("10.1.2.3:9101"));
        assert!(ok("[::1]:12345"));
        // hookd's listeners, in any spelling, allow-listed or not.
        assert!(!ok("[::1]:7700"));
        assert!(!ok("127.0.0.1:7701"));
        assert!(!ok("[::ffff:127.0.0.1]:7700"));
        // Through a proxy (issue #49, 7): an address or localhost at a listener's port is
        // refused by name; any other name is the proxy's.
        let proxied = |h: &str, p: u16| g.check_proxied(h, p).is_ok();
        assert!(!proxied("127.0.0.1", 7700));
        assert!(!proxied("[::1]", 7701));
        assert!(!proxied("localhost", 7700));
        assert!(!proxied("api.localhost", 7701));
        assert!(!proxied("[::ffff:127.0.0.1]", 7700));
        assert_eq!(
            g.check_proxied("LOCALHOST", 7700).unwrap_err().class,
            OWN_LISTENER
        );
        assert!(proxied("127.0.0.1", 8080));
        assert!(proxied("hooks.example", 7700));
        assert!(proxied("10.1.2.3", 7700));
        for bad in [
            "127.0.0.1",
            "127.0.0.1/33",
            "1.2.3.4/32:0",
            "1.2.3.4/32:9-8",
            "x/8",
        ] {
            assert!(bad.parse::<AllowRule>().is_err(), "{bad}");
        }
    }
}

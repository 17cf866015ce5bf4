//! The destination guard (SSRF): which resolved addresses hookd may connect to.
//!
//! hookd is handed URLs by its clients; without a guard, a client could make hookd POST to
//! its own admin port, a cloud metadata service or anything on the private network. Every
//! address is checked *as it is dialed* (see `connect.rs`), after DNS resolution, so a name
//! that resolves to a public address when validated and a private one when used (DNS
//! rebinding) is still refused. IPv4-mapped, IPv4-compatible, NAT64 and 6to4 IPv6 addresses
//! are judged by the IPv4 address they carry. An allow-list of CIDRs admits addresses the
//! operator trusts (`127.0.0.1/32` in the tests and the quickstart).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// Why an address was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("destination address {ip} is {class} and not in the allow-list (allow_destinations)")]
pub struct Refused {
    pub ip: IpAddr,
    pub class: &'static str,
}

#[derive(Debug, Clone, Default)]
pub struct AddressGuard {
    allow: Vec<IpNet>,
}

impl AddressGuard {
    pub fn new(allow: Vec<IpNet>) -> Self {
        Self { allow }
    }

    /// Ok if `ip` is public or allow-listed.
    pub fn check(&self, ip: IpAddr) -> Result<(), Refused> {
        if self.allow.iter().any(|net| net.contains(&ip)) {
            return Ok(());
        }
        // An allow-listed IPv4 network also admits the same address written as IPv6.
        let embedded = match ip {
            IpAddr::V6(v6) => embedded_v4(v6),
            IpAddr::V4(_) => None,
        };
        if let Some(v4) = embedded
            && self.allow.iter().any(|net| net.contains(&IpAddr::V4(v4)))
        {
            return Ok(());
        }
        match special(ip) {
            Some(class) => Err(Refused { ip, class }),
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
        guard.check(ip.parse().unwrap()).is_err()
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
        let err = g.check("10.0.0.1".parse().unwrap()).unwrap_err();
        assert!(err.to_string().contains("private"));
    }
}

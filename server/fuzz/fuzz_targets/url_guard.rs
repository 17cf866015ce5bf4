//! URL validation and address classification (the SSRF guard): any text as a URL, an
//! allow-list rule and an address. What validation accepts must be dialable as written
//! (`http::Uri` agrees on the host), and the guard must never panic.
#![no_main]

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use hookd::api::validate::validate_url;
use hookd_delivery::guard::{AddressGuard, AllowRule};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(normal) = validate_url(text, "url") {
        let uri: http::Uri = normal.parse().expect("a validated URL parses as http::Uri");
        assert!(uri.host().is_some());
        // Normalising twice changes nothing.
        assert_eq!(validate_url(&normal, "url").as_deref(), Ok(normal.as_str()));
    }
    let rules: Vec<AllowRule> = text.split(',').filter_map(|r| r.parse().ok()).collect();
    let guard = AddressGuard::new(rules).with_own(vec![SocketAddr::from(([127, 0, 0, 1], 7700))]);
    if data.len() >= 18 {
        let mut v6 = [0u8; 16];
        v6.copy_from_slice(&data[..16]);
        let port = u16::from_be_bytes([data[16], data[17]]);
        let ip = IpAddr::V6(Ipv6Addr::from(v6));
        let _ = guard.check(SocketAddr::new(ip, port));
        let v4 = IpAddr::V4([data[0], data[1], data[2], data[3]].into());
        let _ = guard.check(SocketAddr::new(v4, port));
    }
});

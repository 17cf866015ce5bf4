//! The listeners' edge: accept TCP, hold hostile connections to account, and terminate TLS.
//!
//! Every accepted socket takes a permit from its listener's connection limit (a socket over
//! the limit is closed at once, so the kernel's backlog never fills with them), then must
//! finish its TLS handshake (or, in plaintext, send its first bytes) within
//! `connections.handshake_timeout_ms`, in a task of its own so a slow client never stalls
//! the accept loop. A connection whose peer sends nothing for `connections.idle_timeout_secs`
//! is closed ([`Conn`]): HTTP/2 keep-alive pings, which a live client answers, keep a quiet
//! gRPC channel open. The HTTP/1 listener is served here too ([`serve_http`]), with a
//! header-read timeout and a header size limit.
//!
//! TLS: rustls with ring, from PEM files; with `tls.client_ca_file`, client certificates are
//! verified (optional or required) and their DNS names become the connection's
//! [`PeerIdentity`]. The files are read again when they change (checked every
//! `tls.reload_interval_secs`) and on SIGHUP; a new handshake uses the new files, open
//! connections keep theirs. A reload that fails keeps the previous certificates and logs why.
//!
//! `limits` (`[connections]`), `tls`, `conn` (an accepted connection), `accept` (the
//! accept loop), `budget` (calls and bytes in flight on the gRPC listener), `http1`
//! (serving HTTP/1 on the accepted connections).

mod accept;
mod budget;
mod conn;
mod http1;
mod limits;
mod tls;

pub use accept::accept;
pub(crate) use budget::{DeadlineBody, HeldBytes, HoldBody, RequestBudget, RequestSlot, Sharer};
pub use conn::{Activity, Conn, ConnInfo, Kind, Pace, PeerIdentity, Placed, Placement};
pub(crate) use http1::serve_http;
pub use limits::ConnectionLimits;
pub use tls::{ClientAuth, IngestClientAuth, Tls, TlsConfig, TlsError, expiry_warning};

/// Raises the soft open-file limit to the hard one and returns it (`None` where it cannot
/// be read). Connections then have room, and the listeners' limits are set below it so
/// storage and outbound pushes always have descriptors.
pub(crate) fn raise_open_file_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let mut limit = getrlimit(Resource::Nofile);
        if let (Some(current), Some(hard)) = (limit.current, limit.maximum)
            && current < hard
        {
            limit.current = Some(hard);
            if setrlimit(Resource::Nofile, limit).is_err() {
                limit.current = Some(current);
            }
        }
        limit.current
    }
    #[cfg(not(unix))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::conn::{Io, PACED_READ_BYTES, Paced, PeerSlots};
    use super::*;
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::net::TcpStream;
    use tokio::sync::Semaphore;
    use tokio::time::Instant;

    #[tokio::test(start_paused = true)]
    async fn a_paced_connection_reads_at_its_rate_in_small_pieces() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        const BODY: usize = 1 << 20;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sender = tokio::spawn(async move {
            let mut tcp = TcpStream::connect(addr).await.unwrap();
            tcp.write_all(&vec![7u8; BODY]).await.unwrap();
            tcp
        });
        let (stream, remote) = listener.accept().await.unwrap();
        let activity = Activity::new();
        // A request in progress: the idle timer (which the paused clock reaches at once
        // whenever the test waits) never closes it.
        let _request = activity.begin();
        let slots = PeerSlots::new(1);
        let mut conn = Conn {
            io: Io::Plain(stream),
            info: ConnInfo {
                remote,
                peer: None,
                activity,
            },
            idle: Box::pin(tokio::time::sleep(Duration::from_secs(3_600))),
            idle_timeout: Duration::from_secs(3_600),
            first_request_timeout: Duration::from_secs(3_600),
            opening: None,
            placed: None,
            paced: Some(Paced {
                // 1 MiB a second, shared with no one.
                pace: Pace::new(1 << 20).unwrap(),
                wait: Box::pin(tokio::time::sleep_until(Instant::now())),
            }),
            _permit: Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap(),
            _peer_slot: slots.try_take(remote.ip()).unwrap(),
        };
        let started = Instant::now();
        let mut buf = vec![0u8; 4 * PACED_READ_BYTES];
        let (mut read, mut largest) = (0, 0);
        while read < BODY {
            let n = conn.read(&mut buf).await.unwrap();
            assert!(n > 0, "the body ended early");
            largest = largest.max(n);
            read += n;
        }
        let took = started.elapsed();
        assert!(
            largest <= PACED_READ_BYTES,
            "a paced read took {largest} bytes at once"
        );
        // Each piece is paid for after it is read: the last one is read once the others
        // (1 MiB less one piece) fit the rate, less the 10 ms a fresh pace allows at once.
        let least =
            Duration::from_millis(1_000 * (BODY - PACED_READ_BYTES) as u64 / BODY as u64 - 10);
        assert!(took >= least, "1 MiB read in {took:?} at 1 MiB/s");
        drop(sender.await.unwrap());
    }

    #[test]
    fn only_requests_put_off_a_connections_close() {
        let (idle, first) = (Duration::from_secs(300), Duration::from_secs(10));
        let activity = Activity::new();
        let opened = activity.opened;
        assert_eq!(activity.close_at(idle, first), Some(opened + first));
        let active = activity.begin();
        assert_eq!(
            activity.close_at(idle, first),
            None,
            "a request in progress"
        );
        let second = activity.begin();
        drop(active);
        assert_eq!(
            activity.close_at(idle, first),
            None,
            "one still in progress"
        );
        drop(second);
        let at = activity.close_at(idle, first).unwrap();
        assert!(at >= opened + idle && at <= Instant::now() + idle, "{at:?}");
    }

    #[test]
    fn an_address_holds_at_most_its_connections() {
        let slots = PeerSlots::new(2);
        let ip: std::net::IpAddr = [10, 0, 0, 1].into();
        let a = slots.try_take(ip).unwrap();
        let _b = slots.try_take(ip).unwrap();
        assert!(slots.try_take(ip).is_none());
        assert!(slots.try_take([10, 0, 0, 2].into()).is_some());
        drop(a);
        let _c = slots.try_take(ip).unwrap();
        drop(_c);
        drop(_b);
        assert!(
            slots.held().get(&ip).is_none(),
            "an address with none is forgotten"
        );
    }

    #[test]
    fn each_sharer_holds_at_most_its_share_and_gives_it_all_back() {
        let limits = ConnectionLimits {
            max_requests_in_flight: 8,
            max_request_bytes_in_flight: 8 << 20,
            max_share_percent: 25,
            ..ConnectionLimits::default()
        };
        let budget = RequestBudget::new(&limits);
        let a = |port| {
            vec![
                Sharer::Connection(SocketAddr::from(([127, 0, 0, 1], port))),
                Sharer::Caller("a".into()),
            ]
        };
        let b = vec![Sharer::Caller("b".into())];
        let first = budget.try_request(a(1)).unwrap();
        let second = budget.try_request(a(2)).unwrap();
        let third = budget.try_request(a(3)).unwrap_err();
        assert!(
            third.contains("caller `a`") && third.contains("25 %"),
            "{third}"
        );
        let other = budget.try_request(b.clone()).unwrap();
        // Bytes: a sharer holding nothing may take more than its share (one large message);
        // holding something, it may not pass its share (2 MiB), and others still may.
        let (ca, cb) = (first.charge(), other.charge());
        budget.try_bytes(&ca.sharers, 3 << 20).unwrap();
        let over = budget.try_bytes(&second.charge().sharers, 1).unwrap_err();
        assert!(over.contains("caller `a`"), "{over}");
        budget.try_bytes(&cb.sharers, 1 << 20).unwrap();
        budget.release(&ca.sharers, 0, 3 << 20);
        budget.release(&cb.sharers, 0, 1 << 20);
        drop((first, second, other));
        assert_eq!(
            budget.in_use(),
            (0, 0),
            "nothing is held, no sharer is left"
        );
        // The total bounds everyone: 8 calls from distinct sharers, then none.
        let slots: Vec<_> = (0..8)
            .map(|n| budget.try_request(vec![Sharer::Caller(format!("c{n}").into())]))
            .collect::<Result<_, _>>()
            .unwrap();
        let full = budget
            .try_request(vec![Sharer::Caller("late".into())])
            .unwrap_err();
        assert!(
            full.contains("connections.max_requests_in_flight"),
            "{full}"
        );
        drop(slots);
        assert_eq!(budget.in_use(), (0, 0));
    }

    #[test]
    fn limits_are_checked_with_their_key() {
        assert!(ConnectionLimits::default().check().is_ok());
        let bad = ConnectionLimits {
            max_header_bytes: 10,
            ..ConnectionLimits::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "connections.max_header_bytes");
        let bad = ConnectionLimits {
            idle_timeout_secs: 10,
            ..ConnectionLimits::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "connections.idle_timeout_secs");
    }

    #[test]
    fn tls_config_errors_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = Tls::from_config(&TlsConfig {
            cert_file: Some(missing.clone()),
            ..TlsConfig::default()
        })
        .unwrap_err();
        assert_eq!(e.key, "key_file");
        let e = Tls::from_config(&TlsConfig {
            cert_file: Some(missing.clone()),
            key_file: Some(missing.clone()),
            ..TlsConfig::default()
        })
        .unwrap_err();
        assert_eq!(e.key, "cert_file");
        assert!(e.message.contains("cannot read"), "{}", e.message);
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate").unwrap();
        let e = Tls::from_config(&TlsConfig {
            cert_file: Some(garbage.clone()),
            key_file: Some(garbage),
            ..TlsConfig::default()
        })
        .unwrap_err();
        assert!(e.message.contains("no PEM certificate"), "{}", e.message);
        let e = Tls::from_config(&TlsConfig {
            client_ca_file: Some(missing),
            ..TlsConfig::default()
        })
        .unwrap_err();
        assert_eq!(e.key, "client_ca_file");
    }

    #[test]
    fn paced_reads_wait_until_all_reading_fits_the_rate() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert!(Pace::new(0).is_none(), "0 is unpaced");
        // 1 MB/s: 1,000 bytes a millisecond, 10 ms of it saved up by a quiet spell.
        let pace = Pace::new(1_000_000).unwrap();
        let later = t0 + ms(1_000);
        assert_eq!(
            pace.charge(4_000, later),
            later - ms(6),
            "within the saved-up burst"
        );
        assert_eq!(pace.charge(6_000, later), later, "the burst spent");
        assert_eq!(pace.charge(2_000, later), later + ms(2), "past it: wait");
        // A second connection reading meanwhile queues behind the first.
        assert_eq!(pace.charge(1_000, later + ms(1)), later + ms(3));
        // Reading at the rate never waits; a long quiet spell saves no more than the burst.
        let much_later = later + ms(60_000);
        assert_eq!(pace.charge(10_000, much_later), much_later);
        assert_eq!(pace.charge(1_000, much_later), much_later + ms(1));
    }
}

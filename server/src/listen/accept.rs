//! The accept loop: a permit from the listener's connection limit (over it, the socket is
//! closed at once), a per-address share, then the TLS handshake (or the first bytes in
//! plaintext) within `connections.handshake_timeout_ms`, in a task of its own.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::conn::{
    Activity, Conn, ConnInfo, Io, Kind, Paced, PeerIdentity, PeerSlot, PeerSlots, Placed, Placement,
};
use super::http1::Throttle;
use super::limits::ConnectionLimits;
use super::tls::Tls;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::time::Instant;

/// Accepts on `listener` until `stop`, and hands over connections that passed the handshake.
/// The channel closes when the loop ends (the servers then stop).
pub fn accept(
    listener: TcpListener,
    kind: Kind,
    tls: Option<Arc<Tls>>,
    limits: &ConnectionLimits,
    max_connections: usize,
    mut stop: watch::Receiver<bool>,
    demote: Option<Arc<dyn Placement>>,
) -> mpsc::Receiver<io::Result<Conn>> {
    let (tx, rx) = mpsc::channel(64);
    let permits = Arc::new(Semaphore::new(max_connections));
    let peers = PeerSlots::new(match limits.max_connections_per_peer {
        0 => (max_connections * usize::from(limits.max_share_percent.clamp(1, 100)) / 100).max(1),
        n => n,
    });
    let handshake = Duration::from_millis(limits.handshake_timeout_ms);
    let idle = Duration::from_secs(limits.idle_timeout_secs);
    let first_request = Duration::from_millis(limits.first_request_timeout_ms);
    tokio::spawn(async move {
        let mut refused_log = Throttle::default();
        loop {
            let accepted = tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                a = listener.accept() => a,
            };
            let (stream, remote) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning; open connections
                    // closing will make room.
                    if refused_log.ready() {
                        tracing::warn!(listener = ?kind, error = %e, "accept failed; backing off");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                if refused_log.ready() {
                    tracing::warn!(
                        listener = ?kind,
                        max_connections,
                        "connection limit reached; closing new connections"
                    );
                }
                drop(stream);
                continue;
            };
            let Some(peer_slot) = peers.try_take(remote.ip()) else {
                if refused_log.ready() {
                    tracing::warn!(
                        listener = ?kind,
                        peer = %remote.ip(),
                        max_connections_per_peer = peers.max,
                        "this address holds its share of connections; closing its new ones"
                    );
                }
                drop(stream);
                continue;
            };
            let opening = Opening {
                remote,
                kind,
                tls: tls.clone(),
                handshake,
                first_request,
                idle,
                permit,
                peer_slot,
                tx: tx.clone(),
            };
            // A suspect client's socket moves to the demoted runtime's reactor, so its
            // handshake and every wake-up after it are that runtime's, not this one's.
            let placed = demote.as_ref().and_then(|d| d.placed(remote.ip()));
            let placed_low = placed.is_some();
            match placed {
                None => {
                    tokio::spawn(opening.run(stream, None));
                }
                Some(low) => match stream.into_std() {
                    Ok(stream) => {
                        low.handle.clone().spawn(async move {
                            match TcpStream::from_std(stream) {
                                Ok(stream) => opening.run(stream, Some(low)).await,
                                Err(e) => {
                                    tracing::debug!(%remote, error = %e, "cannot move a demoted connection");
                                }
                            }
                        });
                    }
                    Err(e) => {
                        tracing::debug!(%remote, error = %e, "cannot move a demoted connection");
                    }
                },
            }
            // A burst of suspects' connections (a flood's wave: 64 at once in the flood
            // test) is accepted one per turn of this runtime, with the gRPC calls and the
            // trusted providers' requests on it served in between rather than after all.
            if placed_low {
                tokio::task::yield_now().await;
            }
        }
    });
    rx
}

/// An accepted connection on its way to being handed over: what [`accept`] knows of it.
struct Opening {
    remote: SocketAddr,
    kind: Kind,
    tls: Option<Arc<Tls>>,
    handshake: Duration,
    first_request: Duration,
    idle: Duration,
    permit: OwnedSemaphorePermit,
    peer_slot: PeerSlot,
    tx: mpsc::Sender<io::Result<Conn>>,
}

impl Opening {
    /// The handshake, then the connection handed over, its timers on the runtime this runs
    /// on (`placed`'s, when that is not the listener's).
    async fn run(self, stream: TcpStream, placed: Option<Placed>) {
        let Self {
            remote,
            kind,
            tls,
            handshake,
            first_request,
            idle,
            permit,
            peer_slot,
            tx,
        } = self;
        let _ = stream.set_nodelay(true);
        let opened = Instant::now() + handshake;
        let io = match tokio::time::timeout(handshake, open(stream, kind, tls)).await {
            Ok(Ok(io)) => io,
            Ok(Err(e)) => {
                tracing::debug!(%remote, error = %e, "connection refused at handshake");
                return;
            }
            Err(_) => {
                tracing::debug!(%remote, "handshake timed out");
                return;
            }
        };
        let peer = match &io {
            Io::Tls(s) => peer_identity(s.get_ref().1),
            Io::Plain(_) => None,
        };
        let conn = Conn {
            io,
            info: ConnInfo {
                remote,
                peer,
                activity: Activity::new(),
            },
            idle: Box::pin(tokio::time::sleep(first_request)),
            first_request_timeout: first_request,
            opening: (kind == Kind::Grpc).then(|| (33, Box::pin(tokio::time::sleep_until(opened)))),
            idle_timeout: idle,
            paced: placed
                .as_ref()
                .and_then(|p| p.pace.clone())
                .map(|pace| Paced {
                    pace,
                    wait: Box::pin(tokio::time::sleep_until(Instant::now())),
                }),
            placed: placed.map(|p| p.handle),
            _permit: permit,
            _peer_slot: peer_slot,
        };
        let _ = tx.send(Ok(conn)).await;
    }
}

/// The TLS handshake, or for plaintext the first bytes of a request.
async fn open(stream: TcpStream, kind: Kind, tls: Option<Arc<Tls>>) -> io::Result<Io> {
    match tls {
        Some(tls) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.current(kind));
            Ok(Io::Tls(Box::new(acceptor.accept(stream).await?)))
        }
        None => {
            // `readable()` may report a fresh socket ready with nothing in it; a peek waits
            // for a byte that is really there.
            if stream.peek(&mut [0u8; 1]).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed before sending anything",
                ));
            }
            Ok(Io::Plain(stream))
        }
    }
}

fn peer_identity(conn: &rustls::ServerConnection) -> Option<Arc<PeerIdentity>> {
    let leaf = conn.peer_certificates()?.first()?;
    let cert = webpki::EndEntityCert::try_from(leaf).ok()?;
    Some(Arc::new(PeerIdentity {
        dns_names: cert.valid_dns_names().map(str::to_owned).collect(),
    }))
}

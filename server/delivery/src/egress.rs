//! How an attempt leaves hookd: straight through the guarded connector, or through an
//! endpoint's HTTP proxy (a CONNECT tunnel, for http and https endpoints alike), and with
//! the TLS settings of its endpoint (a client certificate for mTLS).
//!
//! Through a proxy, the guarded connector dials the proxy: the destination guard checks
//! the proxy's address, and the endpoint's host is resolved by the proxy, not by hookd.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::rt::TokioIo;

use super::connect::{GuardedConnector, Outbound};

/// A client certificate chain (leaf first) and its private key.
pub type Identity = (
    Vec<rustls::pki_types::CertificateDer<'static>>,
    rustls::pki_types::PrivateKeyDer<'static>,
);

/// Why a client certificate or key does not parse.
#[derive(Debug)]
pub enum IdentityError {
    Certificate(String),
    Key(String),
}

/// The TLS settings of push attempts: `roots` trusted, and with `identity` a client
/// certificate for endpoints that ask for one.
pub fn client_tls_config(
    roots: rustls::RootCertStore,
    identity: Option<Identity>,
) -> Result<rustls::ClientConfig, rustls::Error> {
    // The provider is passed explicitly: if another one is ever linked in, rustls's
    // process-wide default would be ambiguous and panic.
    let builder = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots);
    match identity {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key),
        None => Ok(builder.with_no_client_auth()),
    }
}

/// A client certificate chain and its key from PEM: what PutEndpoint validates and the
/// dispatcher builds its TLS settings from.
pub fn parse_identity(certificate_pem: &str, key_pem: &str) -> Result<Identity, IdentityError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_slice_iter(certificate_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| IdentityError::Certificate(e.to_string()))?;
    if chain.is_empty() {
        return Err(IdentityError::Certificate("no CERTIFICATE block".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| IdentityError::Key(e.to_string()))?;
    Ok((chain, key))
}

/// An endpoint's client certificate and key (validated when the endpoint was put; `None`
/// if they no longer parse).
pub(crate) fn identity_of(identity: &hookd_core::push::ClientIdentity) -> Option<Identity> {
    parse_identity(&identity.certificate_pem, &identity.key_pem.0).ok()
}

/// The connector under TLS: direct, or through a proxy.
#[derive(Clone)]
pub enum Egress {
    Direct(GuardedConnector),
    /// The tunnel, and the guard that refuses hookd's own listeners by name first.
    Proxied(
        Tunnel<GuardedConnector>,
        std::sync::Arc<super::guard::AddressGuard>,
    ),
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Direct(_) => "Egress::Direct",
            Self::Proxied(..) => "Egress::Proxied",
        })
    }
}

/// Why a connection could not be made: the guarded connector's error, or the tunnel's.
pub type EgressError = Box<dyn std::error::Error + Send + Sync>;

impl Egress {
    /// Through the proxy at `proxy` (`http://[user:password@]host:port`, validated).
    pub(crate) fn proxied(connector: GuardedConnector, proxy: &str) -> Option<Self> {
        let url = url::Url::parse(proxy).ok()?;
        let host = url.host_str()?;
        let port = url.port_or_known_default()?;
        let uri: Uri = format!("http://{host}:{port}").parse().ok()?;
        let guard = connector.guard().clone();
        let mut tunnel = Tunnel::new(uri, connector);
        if !url.username().is_empty() {
            use base64::Engine as _;
            let user = percent_decode(url.username());
            let password = percent_decode(url.password().unwrap_or(""));
            let basic =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            let mut value = http::HeaderValue::from_str(&format!("Basic {basic}")).ok()?;
            value.set_sensitive(true);
            tunnel = tunnel.with_auth(value);
        }
        Some(Self::Proxied(tunnel, guard))
    }
}

/// A URL's (percent-encoded) user or password as sent.
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

impl tower_service::Service<Uri> for Egress {
    type Response = TokioIo<Outbound>;
    type Error = EgressError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, EgressError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), EgressError>> {
        match self {
            Self::Direct(c) => c.poll_ready(cx).map_err(Into::into),
            Self::Proxied(t, _) => t.poll_ready(cx).map_err(Into::into),
        }
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        match self {
            Self::Direct(c) => {
                let connecting = c.call(dst);
                Box::pin(async move { connecting.await.map_err(Into::into) })
            }
            Self::Proxied(t, guard) => {
                // The tunnel takes 443 for a URI without a port: name the scheme's own.
                let dst = with_port(dst);
                if let (Some(host), Some(port)) = (dst.host(), dst.port_u16())
                    && let Err(refused) = guard.check_proxied(host, port)
                {
                    return Box::pin(async move { Err(Box::new(refused) as EgressError) });
                }
                let connecting = t.call(dst);
                Box::pin(async move { connecting.await.map_err(Into::into) })
            }
        }
    }
}

/// `dst` with its scheme's default port written out.
fn with_port(dst: Uri) -> Uri {
    if dst.port().is_some() {
        return dst;
    }
    let port = if dst.scheme_str() == Some("http") {
        80
    } else {
        443
    };
    let Some(host) = dst.host() else {
        return dst;
    };
    let authority = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let mut parts = dst.clone().into_parts();
    match authority.parse() {
        Ok(a) => parts.authority = Some(a),
        Err(_) => return dst,
    }
    Uri::from_parts(parts).unwrap_or(dst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uri_without_a_port_gets_its_schemes() {
        let uri = |s: &str| s.parse::<Uri>().unwrap();
        assert_eq!(
            with_port(uri("http://a.example/x")),
            uri("http://a.example:80/x")
        );
        assert_eq!(
            with_port(uri("https://a.example/")),
            uri("https://a.example:443/")
        );
        assert_eq!(
            with_port(uri("http://a.example:8080/")),
            uri("http://a.example:8080/")
        );
    }

    #[test]
    fn proxy_credentials_are_percent_decoded() {
        assert_eq!(percent_decode("p%40ss%3Aw"), "p@ss:w");
        assert_eq!(percent_decode("a+b"), "a+b");
        assert_eq!(percent_decode("a&b=c"), "a&b=c");
    }
}

//! The push tests' HTTP receiver: hookd's test kit receiver (`hookd_testkit::Receiver`),
//! with the waits and assertions the tests make on it.

use std::time::{Duration, Instant};

pub(crate) use hookd_testkit::{Received, Reply};

#[derive(Clone)]
pub(crate) struct Sink(hookd_testkit::Receiver);

impl Sink {
    /// A sink that answers `default` to everything not scripted.
    pub(crate) async fn start(default: Reply) -> Self {
        Self(hookd_testkit::Receiver::start(default).await.unwrap())
    }

    pub(crate) fn addr(&self) -> std::net::SocketAddr {
        self.0.addr()
    }

    pub(crate) fn url(&self, path: &str) -> String {
        self.0.url(path)
    }

    /// The next requests get these answers, in order.
    pub(crate) fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.0.script(replies);
    }

    pub(crate) fn set_default(&self, reply: Reply) {
        self.0.set_default(reply);
    }

    pub(crate) fn received(&self) -> Vec<Received> {
        self.0.received()
    }

    pub(crate) fn count(&self) -> usize {
        self.0.count() as usize
    }

    /// Waits (real time, bounded) until at least `n` requests arrived.
    pub(crate) async fn wait_for(&self, n: usize) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.count() < n {
            assert!(
                Instant::now() < deadline,
                "sink got {} requests, expected {n}",
                self.count()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.received()
    }

    /// Asserts that the sink got exactly `n` requests and that no more are coming: once
    /// hookd has no push attempt in flight (every attempt it made has reached its receiver
    /// and been recorded), nothing else is sent until the injected clock moves or a request
    /// arrives (see `harness::push_settled`).
    pub(crate) async fn stays_at(&self, c: &mut hookd_client::Client, n: usize) {
        crate::harness::push_settled(c).await;
        assert_eq!(self.count(), n, "the sink got another number of requests");
    }
}

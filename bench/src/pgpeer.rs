//! The seed documents' PostgreSQL worker, as a push baseline beside hookd's push drain.
//!
//! Events wait in an `outbox` table. Each worker, on its own connection, loops: in one
//! transaction it checks the endpoint's row in a `breakers` table, claims a batch of due
//! events with `SELECT ... FOR UPDATE SKIP LOCKED`, POSTs them to the same loopback sink
//! hookd posts to, deletes the delivered ones and, for failures, bumps `attempts` and sets
//! a full-jitter due time (`uniform(0, min(cap, base * 2^attempts))`) and the breaker's
//! failure count (opening it for a cooldown at the threshold), then commits. PostgreSQL
//! runs with its defaults (fsync, synchronous_commit on), so each committed outcome is
//! durable, as hookd's are. Start one with `bench/peers/postgres.sh start`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rand::RngExt;
use tokio_postgres::NoTls;

use crate::push::Sink;

const SCHEMA: &str = "
DROP TABLE IF EXISTS outbox;
DROP TABLE IF EXISTS breakers;
CREATE TABLE outbox (
    id bigserial PRIMARY KEY,
    endpoint text NOT NULL,
    url text NOT NULL,
    payload bytea NOT NULL,
    attempts int NOT NULL DEFAULT 0,
    due_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_due ON outbox (due_at);
CREATE TABLE breakers (
    endpoint text PRIMARY KEY,
    failures int NOT NULL DEFAULT 0,
    open_until timestamptz
);
";

/// Backoff and breaker settings, as hookd's defaults.
const BASE_MS: f64 = 2_000.0;
const CAP_MS: f64 = 600_000.0;
const BREAKER_THRESHOLD: i32 = 10;
const COOLDOWN_S: f64 = 300.0;

async fn connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("postgres connection: {e}");
        }
    });
    Ok(client)
}

/// Stores `n` events for the sink (not timed), then drains them with `workers` workers
/// claiming `batch` at a time; deliveries per second as the sink counts them.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn drain(
    url: &str,
    sink: &Sink,
    path: &str,
    n: u64,
    workers: usize,
    batch: i64,
    payload: usize,
    timeout: Duration,
) -> anyhow::Result<f64> {
    let setup = connect(url).await?;
    setup.batch_execute(SCHEMA).await?;
    let target_url = sink.url(path);
    let body = vec![b'x'; payload];
    setup
        .execute(
            "INSERT INTO outbox (endpoint, url, payload)
             SELECT 'bench', $1, $2 FROM generate_series(1, $3::bigint)",
            &[&target_url, &body, &(n as i64)],
        )
        .await?;
    setup
        .execute("INSERT INTO breakers (endpoint) VALUES ('bench')", &[])
        .await?;
    setup.batch_execute("ANALYZE outbox").await?;

    let http: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(workers * batch as usize)
        .build_http();
    let before = sink.count();
    let started = Instant::now();
    let deadline = started + timeout;
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let db = connect(url).await?;
        let http = http.clone();
        tasks.push(tokio::spawn(async move {
            worker(db, http, batch, deadline).await
        }));
    }
    for t in tasks {
        t.await??;
    }
    let delivered = sink.count() - before;
    anyhow::ensure!(
        delivered >= n,
        "the PostgreSQL workers delivered {delivered} of {n} within {timeout:?}"
    );
    Ok(delivered as f64 / started.elapsed().as_secs_f64())
}

async fn worker(
    mut db: tokio_postgres::Client,
    http: Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    batch: i64,
    deadline: Instant,
) -> anyhow::Result<()> {
    let claim = db
        .prepare(
            "SELECT id, url, payload, attempts FROM outbox
             WHERE due_at <= now() ORDER BY due_at LIMIT $1
             FOR UPDATE SKIP LOCKED",
        )
        .await?;
    while Instant::now() < deadline {
        let tx = db.transaction().await?;
        let open = tx
            .query_opt(
                "SELECT 1 FROM breakers WHERE endpoint = 'bench' AND open_until > now()",
                &[],
            )
            .await?
            .is_some();
        if open {
            tx.commit().await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let rows = tx.query(&claim, &[&batch]).await?;
        if rows.is_empty() {
            tx.commit().await?;
            let left: i64 = db
                .query_one("SELECT count(*) FROM outbox", &[])
                .await?
                .get(0);
            if left == 0 {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        let mut posts = tokio::task::JoinSet::new();
        for row in &rows {
            let (id, url, payload, attempts): (i64, String, Vec<u8>, i32) =
                (row.get(0), row.get(1), row.get(2), row.get(3));
            let http = http.clone();
            posts.spawn(async move {
                let ok = async {
                    let req = hyper::Request::post(url)
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from(payload)))?;
                    let resp = http.request(req).await?;
                    let status = resp.status();
                    let _ = resp.into_body().collect().await?;
                    anyhow::Ok(status.is_success())
                }
                .await
                .unwrap_or(false);
                (id, attempts, ok)
            });
        }
        let (mut delivered, mut failed) = (Vec::new(), Vec::new());
        while let Some(done) = posts.join_next().await {
            let (id, attempts, ok) = done?;
            if ok {
                delivered.push(id);
            } else {
                failed.push((id, attempts));
            }
        }
        if !delivered.is_empty() {
            tx.execute("DELETE FROM outbox WHERE id = ANY($1)", &[&delivered])
                .await?;
            tx.execute(
                "UPDATE breakers SET failures = 0 WHERE endpoint = 'bench'",
                &[],
            )
            .await?;
        }
        for (id, attempts) in &failed {
            let ceiling = (BASE_MS * 2f64.powi(*attempts)).min(CAP_MS);
            let delay_ms = rand::rng().random_range(0.0..=ceiling);
            tx.execute(
                "UPDATE outbox SET attempts = attempts + 1,
                     due_at = now() + $2::float8 * interval '1 millisecond'
                 WHERE id = $1",
                &[id, &delay_ms],
            )
            .await?;
            tx.execute(
                "UPDATE breakers SET failures = failures + 1,
                     open_until = CASE WHEN failures + 1 >= $1
                         THEN now() + $2::float8 * interval '1 second' ELSE open_until END
                 WHERE endpoint = 'bench'",
                &[&BREAKER_THRESHOLD, &COOLDOWN_S],
            )
            .await?;
        }
        tx.commit().await?;
    }
    Ok(())
}

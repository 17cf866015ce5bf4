//! The console's page render times at scale: hookd holding `endpoints` endpoints and
//! `dead` dead letters spread over them (a receiver that answers 400, one attempt each),
//! each page fetched `samples` times over one keep-alive connection, beside `GET /healthz`
//! on the same connection (the baseline of the same run: the HTTP stack alone).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hookd_client::{Client, Event, pb};
use http_body_util::{BodyExt, Empty};

type Http = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Empty<Bytes>,
>;

/// One GET: (time, status, bytes, the session cookie it set if any).
async fn get(
    http: &Http,
    url: &str,
    cookie: &str,
) -> anyhow::Result<(Duration, u16, usize, String)> {
    let req = http::Request::get(url)
        .header("cookie", cookie)
        .body(Empty::new())?;
    let t = Instant::now();
    let res = http.request(req).await?;
    let status = res.status().as_u16();
    let set = res
        .headers()
        .get(http::header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .unwrap_or_default()
        .to_owned();
    let body = res.into_body().collect().await?.to_bytes();
    Ok((t.elapsed(), status, body.len(), set))
}

fn quantile(v: &mut [Duration], q: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * q).round() as usize]
}

pub(crate) async fn run(
    client: &mut Client,
    http_addr: SocketAddr,
    sink_url: &str,
    endpoints: usize,
    dead: usize,
    samples: usize,
) -> anyhow::Result<()> {
    let t = Instant::now();
    for i in 0..endpoints {
        client
            .put_endpoint(pb::Endpoint {
                name: format!("e{i:05}"),
                url: sink_url.to_owned(),
                max_attempts: 1,
                ..Default::default()
            })
            .await?;
    }
    let mut batch = Vec::new();
    for i in 0..dead {
        let payload = format!(r#"{{"order":{i},"note":"console bench"}}"#);
        batch.push(Event::to_endpoint(
            format!("e{:05}", i % endpoints),
            payload.into_bytes(),
        ));
        if batch.len() == 1_000 {
            client.enqueue_batch(std::mem::take(&mut batch)).await?;
        }
    }
    if !batch.is_empty() {
        client.enqueue_batch(batch).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let total = client.stats().await?.total.unwrap_or_default();
        if total.dead_letter as usize >= dead {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {} of {dead} dead letters after 10 minutes",
            total.dead_letter
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "  set up {endpoints} endpoints and {dead} dead letters in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let http: Http =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_max_idle_per_host(1)
            .build_http();
    let base = format!("http://{http_addr}");
    // No [auth] here: the first GET starts a session (loopback Host).
    let (_, status, _, cookie) = get(&http, &format!("{base}/ui"), "").await?;
    anyhow::ensure!(
        status == 200 && !cookie.is_empty(),
        "no console session: {status}"
    );
    let some_dead = client
        .raw()
        .list_dead_letters(pb::ListDeadLettersRequest {
            page_size: 1,
            ..Default::default()
        })
        .await?
        .into_inner()
        .dead_letters
        .first()
        .map(|d| d.id.clone())
        .unwrap_or_default();
    let last = format!("e{:05}", endpoints - 1);
    let middle = format!("e{:05}", endpoints / 2);
    let pages = [
        ("GET /healthz (baseline)", "/healthz".to_owned()),
        ("overview", "/ui".to_owned()),
        ("endpoints, first page", "/ui/endpoints".to_owned()),
        (
            "endpoints, a middle page",
            format!("/ui/endpoints?after={middle}"),
        ),
        ("endpoints, name filter", "/ui/endpoints?q=e019".to_owned()),
        (
            "endpoint detail + charts",
            format!("/ui/endpoints/{middle}"),
        ),
        ("destinations, first page", "/ui/destinations".to_owned()),
        (
            "dead letters + analysis (all)",
            "/ui/dead-letters".to_owned(),
        ),
        (
            "dead letters of the last endpoint",
            format!("/ui/dead-letters?destination=endpoint%3A{last}"),
        ),
        (
            "dead letters, filter matching none",
            "/ui/dead-letters?status=503".to_owned(),
        ),
        ("message detail", format!("/ui/messages/{some_dead}")),
        ("sources", "/ui/sources".to_owned()),
    ];
    let mut baseline = Duration::ZERO;
    for (name, path) in pages {
        let mut times = Vec::with_capacity(samples);
        let mut size = 0;
        for _ in 0..samples {
            let (t, status, bytes, _) = get(&http, &format!("{base}{path}"), &cookie).await?;
            anyhow::ensure!(status == 200, "{path}: {status}");
            times.push(t);
            size = bytes;
        }
        // The first request of a page pays for what later ones reuse (the dead-letter
        // analysis is kept for 15 s).
        let first = times[0];
        let (p50, p95) = (quantile(&mut times, 0.5), quantile(&mut times, 0.95));
        if baseline.is_zero() {
            baseline = p50;
        }
        println!(
            "  {name:<36} median {:>7.2} ms  p95 {:>7.2} ms  first {:>7.2} ms  {:>4} KB  x{:.0} the baseline",
            p50.as_secs_f64() * 1e3,
            p95.as_secs_f64() * 1e3,
            first.as_secs_f64() * 1e3,
            size / 1024,
            p50.as_secs_f64() / baseline.as_secs_f64()
        );
    }
    Ok(())
}

//! The hookd under test: a child process the tool starts on a temp data dir (the default),
//! or one already running at an address. A child's CPU and RSS are read from /proc.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use hookd_testkit::ChildHookd;

/// The hookd a run talks to.
#[derive(Debug)]
pub struct Target {
    pub grpc: String,
    /// The ingest listener, when the tool started hookd.
    pub ingest: Option<std::net::SocketAddr>,
    /// The HTTP listener (`/metrics`), when the tool started hookd.
    pub http: Option<std::net::SocketAddr>,
    /// Whose CPU and RSS the report shows.
    pub pid: Option<u32>,
    /// The data directory of a hookd the tool started (where the fsync probe writes).
    pub data_dir: Option<std::path::PathBuf>,
    child: Option<ChildHookd>,
    /// A hookd in this process (`--slow-sync-ms`: a slowed disk is a test hook, which the
    /// hookd binary does not hold).
    in_process: Option<hookd_testkit::InProcess>,
    _dir: Option<tempfile::TempDir>,
}

impl Target {
    /// A hookd already running (`http://host:port`); `pid` if the tool may watch it.
    pub fn remote(grpc: String, pid: Option<u32>) -> Self {
        Self {
            grpc,
            ingest: None,
            http: None,
            pid,
            data_dir: None,
            child: None,
            in_process: None,
            _dir: None,
        }
    }

    /// Starts hookd as a child process of this binary (`hookd-loadtest __hookd serve ...`,
    /// which runs hookd's own `cli::main`) on a temp data dir, with `config` as its config
    /// file and loopback allowed as a push destination. Its log (at `info`) goes to `log`
    /// when given, so that the terminal shows the tool's own progress; else to this
    /// process's standard error, at `warn`.
    pub async fn spawn(config: &toml::Table, log: Option<&Path>) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("hookd-loadtest-")
            .tempdir()?;
        let config_path = dir.path().join("hookd.toml");
        std::fs::write(&config_path, toml::to_string(config)?)?;
        let exe = std::env::current_exe().context("cannot find this binary to run hookd")?;
        let extra = [
            "--allow-destination".into(),
            "127.0.0.1/32".into(),
            "--log-level".into(),
            if log.is_some() { "info" } else { "warn" }.into(),
            "--config".into(),
            config_path.into_os_string(),
        ];
        let data = dir.path().join("data");
        let ready_within = Duration::from_secs(30);
        let child = match log {
            Some(log) => {
                ChildHookd::spawn_logged(&exe, &["__hookd"], &data, &extra, ready_within, log)
                    .await
                    .with_context(|| format!("cannot start hookd (its log: {})", log.display()))?
            }
            None => ChildHookd::spawn(&exe, &["__hookd"], &data, &extra, ready_within)
                .await
                .context("cannot start hookd")?,
        };
        Ok(Self {
            grpc: child.grpc.clone(),
            ingest: Some(child.ingest),
            http: Some(child.http),
            pid: child.pid(),
            data_dir: Some(dir.path().join("data")),
            child: Some(child),
            in_process: None,
            _dir: Some(dir),
        })
    }

    /// Starts hookd in this process on a temp data dir, with `config` and loopback allowed
    /// as a push destination, on a disk whose every fsync takes `slow_sync_ms` longer.
    /// Its CPU and RSS are this process's, so the report shows none.
    pub async fn in_process(config: &toml::Table, slow_sync_ms: u64) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("hookd-loadtest-")
            .tempdir()?;
        let mut hookd_config = hookd::Config::from_toml(&toml::to_string(config)?)
            .map_err(|e| anyhow::anyhow!("[hookd.config]: {e}"))?;
        hookd_config.data_dir = dir.path().join("data");
        hookd_config
            .delivery
            .allow_destinations
            .push("127.0.0.1/32".parse().map_err(anyhow::Error::msg)?);
        let faults = hookd_storage::store::faults::Faults::default();
        faults.delay_syncs(slow_sync_ms);
        let hooks = hookd::Hooks {
            faults: Some(faults),
            ..Default::default()
        };
        let running = hookd_testkit::InProcess::start(hookd_config, hooks)
            .await
            .context("cannot start hookd")?;
        Ok(Self {
            grpc: format!("http://{}", running.grpc),
            ingest: Some(running.ingest),
            http: Some(running.http),
            pid: None,
            data_dir: Some(dir.path().join("data")),
            child: None,
            in_process: Some(running),
            _dir: Some(dir),
        })
    }

    /// Stops a child hookd with SIGTERM (a graceful shutdown), then SIGKILL after 15 s.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(child) = self.child.take() {
            child.stop(Duration::from_secs(15)).await?;
        }
        if let Some(running) = self.in_process.take() {
            running.stop().await?;
        }
        Ok(())
    }
}

/// CPU time and RSS of a process, read from /proc.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    pub cpu: Duration,
    pub rss_bytes: u64,
}

/// Clock ticks per second of /proc/PID/stat's times (USER_HZ, 100 on Linux).
const USER_HZ: f64 = 100.0;

/// `None` when /proc cannot be read (not Linux, or the process is gone).
pub fn usage(pid: u32) -> Option<Usage> {
    let proc = Path::new("/proc").join(pid.to_string());
    let stat = std::fs::read_to_string(proc.join("stat")).ok()?;
    // The command name (field 2) may hold spaces: count fields after its closing ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the name and state.
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let status = std::fs::read_to_string(proc.join("status")).ok()?;
    let rss_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse::<u64>()
        .ok()?;
    Some(Usage {
        cpu: Duration::from_secs_f64(ticks as f64 / USER_HZ),
        rss_bytes: rss_kb * 1024,
    })
}

/// Turns successive [`usage`] readings into CPU % over each interval.
#[derive(Debug)]
pub struct Meter {
    pid: Option<u32>,
    last: Option<(Instant, Duration)>,
}

impl Meter {
    pub fn new(pid: Option<u32>) -> Self {
        let mut m = Self { pid, last: None };
        m.read();
        m
    }

    /// (CPU % since the last reading, 100 = one core; RSS in MB).
    pub fn read(&mut self) -> (Option<f64>, Option<f64>) {
        let Some(u) = self.pid.and_then(usage) else {
            return (None, None);
        };
        let now = Instant::now();
        let pct = self.last.map(|(t, cpu)| {
            let wall = (now - t).as_secs_f64();
            if wall > 0.0 {
                (u.cpu.saturating_sub(cpu)).as_secs_f64() / wall * 100.0
            } else {
                0.0
            }
        });
        self.last = Some((now, u.cpu));
        (pct, Some(u.rss_bytes as f64 / 1e6))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_usage() {
        let u = usage(std::process::id()).unwrap();
        assert!(u.rss_bytes > 1_000_000, "{}", u.rss_bytes);
    }
}

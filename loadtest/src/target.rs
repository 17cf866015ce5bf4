//! The hookd under test: a child process the tool starts on a temp data dir (the default),
//! or one already running at an address. A child's CPU and RSS are read from /proc.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// The hookd a run talks to.
#[derive(Debug)]
pub struct Target {
    pub grpc: String,
    /// Whose CPU and RSS the report shows.
    pub pid: Option<u32>,
    child: Option<Child>,
    _dir: Option<tempfile::TempDir>,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Target {
    /// A hookd already running (`http://host:port`); `pid` if the tool may watch it.
    pub fn remote(grpc: String, pid: Option<u32>) -> Self {
        Self {
            grpc,
            pid,
            child: None,
            _dir: None,
        }
    }

    /// Starts hookd as a child process of this binary (`hookd-loadtest __hookd serve ...`,
    /// which runs hookd's own `cli::main`) on a temp data dir, with `config` as its config
    /// file and loopback allowed as a push destination.
    pub async fn spawn(config: &toml::Table) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("hookd-loadtest-")
            .tempdir()?;
        let config_path = dir.path().join("hookd.toml");
        std::fs::write(&config_path, toml::to_string(config)?)?;
        let exe = std::env::current_exe().context("cannot find this binary to run hookd")?;
        // Two tries: a port picked free can be taken before hookd binds it.
        let mut last = None;
        for _ in 0..2 {
            let grpc = format!("127.0.0.1:{}", free_port()?);
            let http = format!("127.0.0.1:{}", free_port()?);
            let child = Command::new(&exe)
                .arg("__hookd")
                .arg("serve")
                .arg("--data-dir")
                .arg(dir.path().join("data"))
                .args(["--grpc-addr", &grpc, "--http-addr", &http])
                .args(["--allow-destination", "127.0.0.1/32"])
                .args(["--log-level", "warn"])
                .arg("--config")
                .arg(&config_path)
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .context("cannot start hookd")?;
            let mut target = Self {
                grpc: format!("http://{grpc}"),
                pid: child.id(),
                child: Some(child),
                _dir: None,
            };
            match target.wait_ready(Duration::from_secs(30)).await {
                Ok(()) => {
                    target._dir = Some(dir);
                    return Ok(target);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("hookd did not start")))
    }

    async fn wait_ready(&mut self, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if hookd_client::Client::connect(self.grpc.clone())
                .await
                .is_ok()
            {
                return Ok(());
            }
            if let Some(child) = &mut self.child
                && let Some(status) = child.try_wait()?
            {
                anyhow::bail!("hookd exited before it was ready: {status}");
            }
            if Instant::now() > deadline {
                anyhow::bail!("hookd did not answer at {} within {within:?}", self.grpc);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops a child hookd with SIGTERM (a graceful shutdown), then SIGKILL after 15 s.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        if let Some(pid) = child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        if tokio::time::timeout(Duration::from_secs(15), child.wait())
            .await
            .is_err()
        {
            child.kill().await?;
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

//! What the box did beside hookd, so a failed SLO says what the limit was: the whole
//! machine's CPU (busy and iowait, from /proc/stat) and load average, this tool's own CPU
//! (the load generator shares the box), and an fsync probe on hookd's disk (one 4 KiB write
//! and fdatasync every 250 ms, and a second of them back to back before the traffic).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::target::Meter;

/// One second of the box, as the sampler reads it.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostSample {
    /// The whole machine's CPU busy over the second, 0 to 100 (100 = every core).
    pub busy_pct: Option<f64>,
    /// Share of the machine's CPU time spent waiting for I/O, 0 to 100.
    pub iowait_pct: Option<f64>,
    /// The 1-minute load average.
    pub load1: Option<f64>,
    /// This tool's CPU (100 = one core).
    pub tool_cpu_pct: Option<f64>,
}

#[derive(Debug, Clone, Copy)]
struct CpuTimes {
    total: u64,
    idle: u64,
    iowait: u64,
}

/// The `cpu` line of /proc/stat: user nice system idle iowait irq softirq steal (guest time
/// is already counted in user).
fn cpu_times() -> Option<CpuTimes> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    (f.len() == 8).then(|| CpuTimes {
        total: f.iter().sum(),
        idle: f[3] + f[4],
        iowait: f[4],
    })
}

/// A `/proc/meminfo` figure in MB (`MemTotal`, `MemAvailable`).
pub fn meminfo_mb(key: &str) -> Option<f64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info
        .lines()
        .find(|l| l.starts_with(key) && l[key.len()..].starts_with(':'))?;
    let kb: f64 = line[key.len() + 1..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb * 1024.0 / 1e6)
}

fn load1() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Successive readings of the machine and of this process.
#[derive(Debug)]
pub struct HostMeter {
    last: Option<CpuTimes>,
    tool: Meter,
}

impl Default for HostMeter {
    fn default() -> Self {
        Self::new()
    }
}

impl HostMeter {
    pub fn new() -> Self {
        Self {
            last: cpu_times(),
            tool: Meter::new(Some(std::process::id())),
        }
    }

    /// The interval since the last reading.
    pub fn read(&mut self) -> HostSample {
        let now = cpu_times();
        let (busy_pct, iowait_pct) = match (self.last, now) {
            (Some(a), Some(b)) if b.total > a.total => {
                let total = (b.total - a.total) as f64;
                let idle = b.idle.saturating_sub(a.idle) as f64;
                let wait = b.iowait.saturating_sub(a.iowait) as f64;
                (
                    Some(((total - idle) / total * 100.0).clamp(0.0, 100.0)),
                    Some((wait / total * 100.0).clamp(0.0, 100.0)),
                )
            }
            _ => (None, None),
        };
        self.last = now;
        HostSample {
            busy_pct,
            iowait_pct,
            load1: load1(),
            tool_cpu_pct: self.tool.read().0,
        }
    }
}

/// The disk's fsync speed before the traffic: 4 KiB writes, each followed by fdatasync,
/// back to back.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct FsyncBaseline {
    pub per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

const PROBE_FILE: &str = "hookd-loadtest-fsync-probe";

fn probe_file(dir: &Path) -> std::io::Result<(File, PathBuf)> {
    let path = dir.join(PROBE_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)?;
    Ok((file, path))
}

/// One write and fdatasync; its time in ms.
fn sync_once(file: &File, block: &[u8]) -> std::io::Result<f64> {
    let start = Instant::now();
    file.write_all_at(block, 0)?;
    file.sync_data()?;
    Ok(start.elapsed().as_secs_f64() * 1e3)
}

/// `q` (0 to 1) of `ms`, sorted here.
pub fn quantile(ms: &mut [f64], q: f64) -> f64 {
    if ms.is_empty() {
        return 0.0;
    }
    ms.sort_by(f64::total_cmp);
    let i = ((ms.len() as f64 - 1.0) * q).round() as usize;
    ms[i.min(ms.len() - 1)]
}

/// Back-to-back fsyncs in `dir` for `time` (at most `max` of them). Blocking.
pub fn baseline(dir: &Path, time: Duration, max: usize) -> std::io::Result<FsyncBaseline> {
    let (file, path) = probe_file(dir)?;
    let block = [0x5au8; 4096];
    let start = Instant::now();
    let mut ms = Vec::new();
    while start.elapsed() < time && ms.len() < max {
        ms.push(sync_once(&file, &block)?);
    }
    let elapsed = start.elapsed().as_secs_f64();
    drop(file);
    let _ = std::fs::remove_file(path);
    Ok(FsyncBaseline {
        per_s: ms.len() as f64 / elapsed.max(1e-9),
        p50_ms: quantile(&mut ms, 0.5),
        p99_ms: quantile(&mut ms, 0.99),
    })
}

/// An fsync every `every` on a thread of its own, until stopped.
#[derive(Debug)]
pub struct FsyncProbe {
    stop: Arc<AtomicBool>,
    /// Samples (ms) since the sampler last took them, and all of them.
    recent: Arc<Mutex<(Vec<f64>, Vec<f64>)>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    path: PathBuf,
}

impl FsyncProbe {
    pub fn start(dir: &Path, every: Duration) -> std::io::Result<Self> {
        let (file, path) = probe_file(dir)?;
        let stop = Arc::new(AtomicBool::new(false));
        let recent = Arc::new(Mutex::new((Vec::new(), Vec::new())));
        let thread = {
            let (stop, recent) = (stop.clone(), recent.clone());
            std::thread::Builder::new()
                .name("fsync-probe".into())
                .spawn(move || {
                    let block = [0xa5u8; 4096];
                    while !stop.load(Ordering::Relaxed) {
                        // A failing disk shows in hookd's own figures; the probe just stops.
                        let Ok(ms) = sync_once(&file, &block) else {
                            break;
                        };
                        if let Ok(mut r) = recent.lock() {
                            r.0.push(ms);
                            r.1.push(ms);
                        }
                        std::thread::sleep(every);
                    }
                })?
        };
        Ok(Self {
            stop,
            recent,
            thread: Mutex::new(Some(thread)),
            path,
        })
    }

    /// The slowest fsync since the last call (ms), if any ran.
    pub fn take_max(&self) -> Option<f64> {
        let mut r = self.recent.lock().ok()?;
        let max = r.0.iter().copied().reduce(f64::max);
        r.0.clear();
        max
    }

    /// Every sample, once the thread has stopped.
    pub fn finish(&self) -> Vec<f64> {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = thread {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
        self.recent.lock().map(|r| r.1.clone()).unwrap_or_default()
    }
}

impl Drop for FsyncProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The box over the run, beside hookd's own CPU and RSS.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct HostFigures {
    pub cores: usize,
    pub busy_avg_pct: Option<f64>,
    pub busy_max_pct: Option<f64>,
    pub iowait_avg_pct: Option<f64>,
    pub load1_max: Option<f64>,
    /// This tool (the load generator) on the same box; 100 = one core.
    pub tool_cpu_avg_pct: Option<f64>,
    pub tool_cpu_max_pct: Option<f64>,
    /// Where the probe wrote (hookd's data directory when the tool started hookd).
    pub fsync_dir: String,
    pub fsync_before: Option<FsyncBaseline>,
    /// The probe during the run: one fsync every 250 ms.
    pub fsync_samples: usize,
    pub fsync_p50_ms: Option<f64>,
    pub fsync_p99_ms: Option<f64>,
    pub fsync_max_ms: Option<f64>,
    /// `--slow-sync-ms`: hookd ran in this process on a disk whose every fsync took this
    /// much longer (0: the real disk, hookd a process of its own). The tool's CPU then
    /// holds hookd's too, and the probe above measures the real disk, not the delay.
    pub slow_sync_ms: u64,
    /// What most likely set the pace: `box`, `load generator`, `disk` or `hookd`, and why.
    pub limit: String,
}

impl HostFigures {
    /// Whether the disk, not hookd, set the pace: fsyncs during the run well above the
    /// disk's before it, or much time waiting for I/O.
    pub fn disk_slow(&self) -> bool {
        let fsync_slow = match (self.fsync_p99_ms, self.fsync_before) {
            (Some(during), Some(before)) => during > (4.0 * before.p50_ms).max(10.0),
            (Some(during), None) => during > 50.0,
            _ => false,
        };
        fsync_slow || self.iowait_avg_pct.is_some_and(|w| w > 25.0)
    }

    /// Says which of the box's CPU, the load generator, the disk or hookd itself was the
    /// limit, from the run's figures.
    pub fn judge(&mut self, hookd_cpu_avg: Option<f64>) {
        let cores = self.cores.max(1) as f64;
        let fmt = |v: Option<f64>| v.map_or("n/a".to_owned(), |v| format!("{v:.0} %"));
        let tool_share = self.tool_cpu_avg_pct.map(|t| t / (cores * 100.0));
        let disk_slow = self.disk_slow();
        let busy = self.busy_max_pct.is_some_and(|b| b >= 90.0);
        self.limit = if self.slow_sync_ms > 0 {
            let ms = self.slow_sync_ms;
            if busy {
                format!(
                    "box: the machine's CPU peaked at {} busy ({} cores; hookd ran in this tool's process, {} of one core together), with every fsync {ms} ms longer (--slow-sync-ms)",
                    fmt(self.busy_max_pct),
                    self.cores,
                    fmt(self.tool_cpu_avg_pct)
                )
            } else {
                format!(
                    "disk (emulated): every fsync took {ms} ms longer (--slow-sync-ms), so hookd commits at most {:.0} times a second and its group commit sets how many requests each carries",
                    1000.0 / ms as f64
                )
            }
        } else if busy {
            let who =
                if tool_share.is_some_and(|t| t >= 0.4) || self.tool_cpu_avg_pct > hookd_cpu_avg {
                    "load generator"
                } else {
                    "box"
                };
            format!(
                "{who}: the machine's CPU peaked at {} busy ({} cores; hookd {} of one core, this tool {}). \
                 Measure hookd with the load generator on another machine (--target) or on a bigger box",
                fmt(self.busy_max_pct),
                self.cores,
                fmt(hookd_cpu_avg),
                fmt(self.tool_cpu_avg_pct)
            )
        } else if disk_slow {
            format!(
                "disk: fsync p99 {} ms during the run against p50 {} ms before it (iowait {}): the disk, not hookd, set the commit rate",
                self.fsync_p99_ms
                    .map_or("n/a".into(), |v| format!("{v:.1}")),
                self.fsync_before
                    .map_or("n/a".into(), |b| format!("{:.1}", b.p50_ms)),
                fmt(self.iowait_avg_pct)
            )
        } else {
            format!(
                "hookd: the box had CPU to spare (busy at most {}) and the disk kept up (fsync p99 {} ms); \
                 hookd's own limits set the pace (its engine thread, endpoints' in-flight and rate limits, backpressure)",
                fmt(self.busy_max_pct),
                self.fsync_p99_ms
                    .map_or("n/a".into(), |v| format!("{v:.1}"))
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_machine_and_probes_the_disk() {
        let mut m = HostMeter::new();
        // Some CPU for the interval to see.
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_add(1);
        }
        assert!(x > 0);
        let s = m.read();
        assert!(
            s.busy_pct.is_some_and(|b| (0.0..=100.0).contains(&b)),
            "{s:?}"
        );
        assert!(s.load1.is_some());
        let dir = tempfile::tempdir().unwrap();
        let b = baseline(dir.path(), Duration::from_millis(200), 20).unwrap();
        assert!(b.per_s > 0.0 && b.p50_ms > 0.0, "{b:?}");
        assert!(!dir.path().join(PROBE_FILE).exists());
    }

    #[test]
    fn the_limit_follows_the_figures() {
        let base = HostFigures {
            cores: 2,
            busy_max_pct: Some(50.0),
            fsync_before: Some(FsyncBaseline {
                per_s: 3000.0,
                p50_ms: 0.3,
                p99_ms: 1.0,
            }),
            fsync_p99_ms: Some(1.0),
            tool_cpu_avg_pct: Some(20.0),
            ..Default::default()
        };
        let mut h = base.clone();
        h.judge(Some(80.0));
        assert!(h.limit.starts_with("hookd:"), "{}", h.limit);
        let mut h = base.clone();
        h.busy_max_pct = Some(99.0);
        h.judge(Some(80.0));
        assert!(h.limit.starts_with("box:"), "{}", h.limit);
        h.tool_cpu_avg_pct = Some(120.0);
        h.judge(Some(80.0));
        assert!(h.limit.starts_with("load generator:"), "{}", h.limit);
        let mut h = base.clone();
        h.fsync_p99_ms = Some(40.0);
        h.judge(Some(80.0));
        assert!(h.limit.starts_with("disk:"), "{}", h.limit);
        let mut h = base;
        h.slow_sync_ms = 2;
        h.judge(None);
        assert!(
            h.limit.starts_with("disk (emulated):") && h.limit.contains("at most 500 times"),
            "{}",
            h.limit
        );
        h.busy_max_pct = Some(95.0);
        h.judge(None);
        assert!(h.limit.starts_with("box:"), "{}", h.limit);
    }
}

//! CPU time by thread of this process, from `/proc/self/task/*/stat`: what each of hookd's
//! threads spends per event in a leg run in process (issue #28 asks for it before and
//! after the storage change).
//!
//! Threads are grouped by name: hookd's own (`hookd-engine`, the log writer, the apply
//! stage...) and the tokio workers. The load generator runs on the same tokio workers as
//! hookd's gRPC server, so the workers' figure is both sides of every call together. The
//! kernel counts in clock ticks (usually 10 ms), so a figure is only as good as the leg is
//! long; a thread that ends during the leg is not counted, so take the second snapshot
//! before stopping hookd.

use std::collections::HashMap;

/// CPU time so far of every thread of this process: thread id -> (name, nanoseconds).
#[derive(Debug, Default)]
pub(crate) struct Snapshot(HashMap<u32, (String, u64)>);

/// Reads every thread's user + system time; a thread that ends while being read is left
/// out, and so is everything where `/proc` cannot be read (the figures are then empty).
pub(crate) fn snapshot() -> Snapshot {
    let ns_per_tick = 1_000_000_000 / rustix::param::clock_ticks_per_second().max(1);
    let mut threads = HashMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Snapshot(threads);
    };
    for task in tasks.flatten() {
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(task.path().join("stat"))
            && let Some((name, ticks)) = parse_stat(&stat)
        {
            threads.insert(tid, (name, ticks.saturating_mul(ns_per_tick)));
        }
    }
    Snapshot(threads)
}

/// The user + system CPU time so far of a whole process (every thread, ended ones too), in
/// nanoseconds; `None` where `/proc` cannot be read.
pub(crate) fn process_ns(pid: u32) -> Option<u64> {
    let ns_per_tick = 1_000_000_000 / rustix::param::clock_ticks_per_second().max(1);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat).map(|(_, ticks)| ticks.saturating_mul(ns_per_tick))
}

/// The name and the user + system ticks of one `/proc/<pid>/task/<tid>/stat` line. The
/// name is in parentheses and may hold spaces or parentheses itself, so the fields are
/// counted from the last `)`.
fn parse_stat(stat: &str) -> Option<(String, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_owned();
    // After the name: state (field 3), then ... utime is field 14, stime field 15.
    let fields: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((name, utime + stime))
}

/// CPU microseconds per event between two snapshots, by thread name, most first; threads
/// that spent nothing are left out.
pub(crate) fn per_event(before: &Snapshot, after: &Snapshot, events: u64) -> Vec<(String, f64)> {
    let mut by_name: HashMap<&str, u64> = HashMap::new();
    for (tid, (name, ns)) in &after.0 {
        let was = before.0.get(tid).map_or(0, |(_, ns)| *ns);
        *by_name.entry(name.as_str()).or_default() += ns.saturating_sub(was);
    }
    let events = events.max(1) as f64;
    let mut out: Vec<(String, f64)> = by_name
        .into_iter()
        .filter(|(_, ns)| *ns > 0)
        .map(|(name, ns)| (name.to_owned(), ns as f64 / 1_000.0 / events))
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// One line: `cpu per event: hookd-engine 6.1 us, tokio-runtime-w 40.2 us, ... (total)`.
pub(crate) fn line(figures: &[(String, f64)]) -> String {
    let total: f64 = figures.iter().map(|(_, us)| us).sum();
    let parts: Vec<String> = figures
        .iter()
        .map(|(name, us)| format!("{name} {us:.1}"))
        .collect();
    format!(
        "cpu per event (us, by thread): {} (total {total:.1})",
        parts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_from_the_last_parenthesis() {
        let line = "4242 (hookd (engine) x) S 1 2 3 4 5 6 7 8 9 10 250 35 0 0 20 0 1 0";
        assert_eq!(parse_stat(line), Some(("hookd (engine) x".into(), 285)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (short) S 1 2"), None);
    }

    #[test]
    fn figures_are_per_event_by_name_and_count_new_threads_from_zero() {
        let before = Snapshot(HashMap::from([
            (1, ("hookd-engine".into(), 1_000_000)),
            (2, ("tokio-runtime-w".into(), 5_000_000)),
        ]));
        let after = Snapshot(HashMap::from([
            (1, ("hookd-engine".into(), 3_000_000)),
            (2, ("tokio-runtime-w".into(), 9_000_000)),
            (3, ("tokio-runtime-w".into(), 2_000_000)),
            (4, ("idle".into(), 0)),
        ]));
        let figures = per_event(&before, &after, 1_000);
        assert_eq!(
            figures,
            vec![
                ("tokio-runtime-w".to_owned(), 6.0),
                ("hookd-engine".to_owned(), 2.0),
            ]
        );
        assert!(
            line(&figures).ends_with("(total 8.0)"),
            "{}",
            line(&figures)
        );
    }

    #[test]
    fn this_process_has_a_thread_that_spent_cpu() {
        let before = snapshot();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let after = snapshot();
        let me = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        let (name, ns) = after
            .0
            .get(&me)
            .expect("this thread read from /proc/self/task");
        assert_eq!(
            Some(name.as_str()),
            std::thread::current().name().map(|n| &n[..n.len().min(15)])
        );
        assert!(*ns >= before.0.get(&me).map_or(0, |(_, ns)| *ns));
    }
}

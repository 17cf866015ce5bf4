//! `hookd-loadtest run SCENARIO.toml [--duration 30s] [--out DIR] [--target URL]`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use hookd_loadtest::noisy::{NoisyOptions, Spec as NoisySpec};
use hookd_loadtest::run::{Options, run};
use hookd_loadtest::scenario::Scenario;

#[derive(Debug, Parser)]
#[command(
    name = "hookd-loadtest",
    version,
    about = "Capacity planning for hookd: what one box sustains for a mix of endpoints"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a scenario and write its report (table, report.json, SVG plots).
    #[command(after_help = EXIT_CODES)]
    Run {
        scenario: PathBuf,
        /// Overrides the scenario's `duration` (e.g. 30s, 2m).
        #[arg(long, value_parser = humantime::parse_duration)]
        duration: Option<Duration>,
        /// Where report.json and the SVG plots go (default: the scenario's name under
        /// ./loadtest-out).
        #[arg(long)]
        out: Option<PathBuf>,
        /// A running hookd (http://host:port) instead of one started in a temp dir. It must
        /// allow 127.0.0.1 as a push destination (`--allow-destination 127.0.0.1/32`).
        #[arg(long)]
        target: Option<String>,
        /// The running hookd's pid, so the report can show its CPU and RSS.
        #[arg(long, requires = "target")]
        target_pid: Option<u32>,
        /// With --target: a directory on the disk the running hookd writes to, for the
        /// fsync probe (default: the current directory). A hookd the tool starts is probed
        /// in its own data directory.
        #[arg(long, requires = "target")]
        probe_dir: Option<PathBuf>,
        /// Multiplies every offered rate of the scenario (e.g. 2 = the same mix at twice the
        /// volume).
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
        /// Emulates a slow disk: every fsync of the hookd the tool starts takes this many ms
        /// longer (hookd then runs inside this process, so the report shows no CPU or RSS
        /// of its own). 0: the real disk, hookd as a child process.
        #[arg(long, default_value_t = 0, conflicts_with = "target", value_parser = clap::value_parser!(u64).range(0..=10_000))]
        slow_sync_ms: u64,
        /// Runs the scenario this many times and prints how far the results spread.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
        repeat: u32,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// Checks scenario files without running them; exits 2 if one is refused.
    Check { scenarios: Vec<PathBuf> },
}

const EXIT_CODES: &str = "Exit codes:
  0  every run passed: the checker found nothing lost, unexpected or undelivered, and no
     SLO limit was broken
  1  the checker found a lost, unexpected, undelivered or unaccounted-for event (in any
     run of --repeat)
  2  bad usage or a scenario file refused (the key and line are named)
  3  the checker passed but an SLO limit was broken (the report names each, and the
     `limit` line says whether the box, the load generator, the disk or hookd set the pace)
  4  the run could not be made: hookd did not start, the target did not answer, a report
     could not be written";

/// What the runs came to, worst first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Passed,
    SloBroken,
    CheckerFailed,
}

/// The allocator of the `hookd` binary: the hookd this tool starts runs in this binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // `hookd-loadtest __hookd serve ...` is hookd itself: how the tool runs the hookd it
    // measures (a child process of this binary).
    if let Some(exit) = hookd_testkit::trampoline() {
        return exit;
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Check { scenarios } => {
            let mut code = ExitCode::SUCCESS;
            for path in scenarios {
                if is_noisy(&path) {
                    match NoisySpec::from_file(&path) {
                        Ok(s) => println!("{}: ok ({})", path.display(), s.name),
                        Err(e) => {
                            eprintln!("{e}");
                            code = ExitCode::from(2);
                        }
                    }
                    continue;
                }
                match Scenario::from_file(&path) {
                    Ok(s) => println!("{}: ok ({})", path.display(), s.name),
                    Err(e) => {
                        eprintln!("{e}");
                        code = ExitCode::from(2);
                    }
                }
            }
            code
        }
        Command::Run {
            scenario,
            duration,
            out,
            target,
            target_pid,
            probe_dir,
            slow_sync_ms,
            scale,
            repeat,
            quiet,
        } => {
            if !(scale > 0.0 && scale.is_finite()) {
                eprintln!("--scale must be above 0");
                return ExitCode::from(2);
            }
            if duration.is_some_and(|d| d < Duration::from_secs(1)) {
                eprintln!("--duration must be at least 1s");
                return ExitCode::from(2);
            }
            if is_noisy(&scenario) {
                if target.is_some() || slow_sync_ms > 0 || repeat > 1 {
                    eprintln!(
                        "a noisy-neighbour scenario runs once, on a hookd it starts: --target, --slow-sync-ms and --repeat do not apply"
                    );
                    return ExitCode::from(2);
                }
                return run_noisy(&scenario, duration, out, scale);
            }
            let s = match Scenario::from_file(&scenario) {
                Ok(s) => s.scaled(scale),
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            if slow_sync_ms > 0 {
                println!(
                    "slow disk emulated: every fsync of hookd takes {slow_sync_ms} ms longer (hookd runs in this process: no CPU or RSS of its own in the report)"
                );
            }
            let out = out.unwrap_or_else(|| PathBuf::from("loadtest-out").join(&s.name));
            // A hookd the tool starts logs to a file beside the report, not over the
            // progress on the terminal; a fresh file for each invocation.
            let hookd_log = match &target {
                Some(_) => None,
                None => match start_hookd_log(&out, slow_sync_ms > 0) {
                    Ok(log) => Some(log),
                    Err(e) => {
                        eprintln!("cannot write hookd's log under {}: {e}", out.display());
                        return ExitCode::from(4);
                    }
                },
            };
            let options = Options {
                duration,
                target,
                target_pid,
                progress: !quiet,
                probe_dir,
                slow_sync_ms,
                hookd_log,
            };
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("cannot start the runtime: {e}");
                    return ExitCode::from(4);
                }
            };
            match runtime.block_on(repeated(&s, &options, &out, repeat)) {
                Ok(Outcome::Passed) => ExitCode::SUCCESS,
                Ok(Outcome::CheckerFailed) => ExitCode::from(1),
                Ok(Outcome::SloBroken) => ExitCode::from(3),
                Err(e) => {
                    eprintln!("hookd-loadtest: {e:#}");
                    ExitCode::from(4)
                }
            }
        }
    }
}

fn is_noisy(path: &std::path::Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| NoisySpec::is_noisy(&t))
}

/// Runs a noisy-neighbour scenario (`[noisy]`): its two legs, the table, report.json.
fn run_noisy(
    path: &std::path::Path,
    leg: Option<Duration>,
    out: Option<PathBuf>,
    scale: f64,
) -> ExitCode {
    let s = match NoisySpec::from_file(path) {
        Ok(s) => s.scaled(scale),
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let out = out.unwrap_or_else(|| PathBuf::from("loadtest-out").join(&s.name));
    let hookd_log = match start_hookd_log(&out, false) {
        Ok(log) => log,
        Err(e) => {
            eprintln!("cannot write hookd's log under {}: {e}", out.display());
            return ExitCode::from(4);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::from(4);
        }
    };
    let options = NoisyOptions {
        leg,
        hookd_log: Some(hookd_log.clone()),
    };
    let report = match runtime.block_on(hookd_loadtest::noisy::run(&s, &options)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("hookd-loadtest: {e:#}");
            return ExitCode::from(4);
        }
    };
    print!("{}", report.table());
    match report.write(&out) {
        Ok(path) => println!(
            "report: {}\nhookd's log: {}",
            path.display(),
            hookd_log.display()
        ),
        Err(e) => {
            eprintln!("cannot write the report: {e:#}");
            return ExitCode::from(4);
        }
    }
    if !report.passed_checker {
        ExitCode::from(1)
    } else if !report.passed_slo {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}

/// `out/hookd.log`, emptied: where the hookd this invocation starts writes its log. When
/// hookd runs in this process (`in_process`, `--slow-sync-ms`), its log is this process's
/// `tracing` output, at `info`, into the same file.
fn start_hookd_log(out: &std::path::Path, in_process: bool) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(out)?;
    let path = out.join("hookd.log");
    let file = std::fs::File::create(&path)?;
    if in_process {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(file))
            .try_init();
    }
    Ok(path)
}

/// Runs `s` `times` times (reports in `out`, or `out/run-N` when repeated); the worst
/// outcome of the runs. Repeated, `out` holds one summary on top (`summary.json`,
/// `summary.txt`: each run's figure, the median and the spread), and no earlier run's
/// report is left beside it.
async fn repeated(
    s: &Scenario,
    o: &Options,
    out: &std::path::Path,
    times: u32,
) -> anyhow::Result<Outcome> {
    let mut worst = Outcome::Passed;
    let mut figures = Vec::new();
    if times > 1 {
        for stale in hookd_loadtest::report::Report::FILES {
            let path = out.join(stale);
            if path.exists() {
                std::fs::remove_file(&path)?;
            }
        }
    }
    for i in 1..=times {
        let report = run(s, o).await?;
        print!("{}", report.table());
        let dir = if times == 1 {
            out.to_owned()
        } else {
            out.join(format!("run-{i}"))
        };
        let files = report.write(&dir)?;
        println!(
            "report: {}",
            files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let Some(log) = &o.hookd_log {
            println!("hookd's log: {}", log.display());
        }
        worst = worst.max(if !report.verdict.passed() {
            Outcome::CheckerFailed
        } else if !report.passed {
            Outcome::SloBroken
        } else {
            Outcome::Passed
        });
        figures.push(report.summary_line());
    }
    if times > 1 {
        let what = if s.capacity.is_some() {
            "highest sustainable rate (events/s)"
        } else {
            "delivered/s"
        };
        let summary = hookd_loadtest::report::Summary::of(&s.name, what, figures);
        print!("\n{}", summary.table());
        let files = summary.write(out)?;
        println!(
            "summary: {}",
            files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(worst)
}

//! `hookd-loadtest run SCENARIO.toml [--duration 30s] [--out DIR] [--target URL]`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
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
    /// Run a scenario; exits 1 if the checker finds a lost, unexpected or undelivered event.
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
        /// Multiplies every offered rate of the scenario (e.g. 2 = the same mix at twice the
        /// volume).
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
        /// Runs the scenario this many times and prints how far the results spread.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
        repeat: u32,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// Checks scenario files without running them.
    Check { scenarios: Vec<PathBuf> },
}

/// The allocator of the `hookd` binary: the hookd this tool starts runs in this binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // `hookd-loadtest __hookd serve ...` is hookd itself: how the tool runs the hookd it
    // measures (a child process of this binary).
    if let Some(exit) = hookd::testkit::trampoline() {
        return exit;
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Check { scenarios } => {
            let mut code = ExitCode::SUCCESS;
            for path in scenarios {
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
            let s = match Scenario::from_file(&scenario) {
                Ok(s) => s.scaled(scale),
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            let options = Options {
                duration,
                target,
                target_pid,
                progress: !quiet,
            };
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let out = out.unwrap_or_else(|| PathBuf::from("loadtest-out").join(&s.name));
            match runtime.block_on(repeated(&s, &options, &out, repeat)) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(e) => {
                    eprintln!("hookd-loadtest: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Runs `s` `times` times (reports in `out`, or `out/run-N` when repeated); true if every
/// run passed the checker.
async fn repeated(
    s: &Scenario,
    o: &Options,
    out: &std::path::Path,
    times: u32,
) -> anyhow::Result<bool> {
    let mut passed = true;
    let mut figures = Vec::new();
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
        passed &= report.passed;
        figures.push(match &report.capacity {
            Some(c) => c.sustainable_rate.unwrap_or(0.0),
            None => report.delivered_per_s,
        });
    }
    if times > 1 {
        let (lo, hi) = figures
            .iter()
            .fold((f64::MAX, 0.0f64), |(lo, hi), f| (lo.min(*f), hi.max(*f)));
        let mid = (lo + hi) / 2.0;
        let what = if s.capacity.is_some() {
            "highest sustainable rate"
        } else {
            "delivered/s"
        };
        println!(
            "\n{times} runs, {what}: {}; spread ±{:.1} % around {mid:.0}",
            figures
                .iter()
                .map(|f| format!("{f:.0}"))
                .collect::<Vec<_>>()
                .join(", "),
            if mid > 0.0 {
                (hi - lo) / 2.0 / mid * 100.0
            } else {
                0.0
            }
        );
    }
    Ok(passed)
}

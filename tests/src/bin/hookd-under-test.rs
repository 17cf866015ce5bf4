fn main() -> std::process::ExitCode {
    hookd::cli::main()
}

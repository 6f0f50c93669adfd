use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `netpoller check-config`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Configuration file (TOML).
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let _ = args;
    anyhow::bail!("check-config: being built")
}

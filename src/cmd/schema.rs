//! `netpoller schema`: print, create or check the Glaber history tables.
//!
//! Without flags it prints the DDL for the configured server (its version decides
//! whether `TTL` / `ttl_only_drop_parts` are emitted; `--server-version` prints for
//! another server without contacting one). `--apply` creates what is missing and
//! verifies existing tables; `--check` only verifies. Existing tables are never altered.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `netpoller schema`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Configuration file (TOML), or a directory of them (as `run -c` takes it); its
    /// `[clickhouse]` section names server and database.
    /// Not needed with --server-version: the defaults' DDL (database `glaber`, no TTL,
    /// trends tables).
    #[arg(
        short,
        long,
        value_name = "PATH",
        required_unless_present = "server_version"
    )]
    pub config: Option<PathBuf>,
    /// Create the database and missing tables, then verify every table's columns.
    #[arg(long, conflicts_with_all = ["check", "server_version"])]
    pub apply: bool,
    /// Only verify, create nothing (exit 1 naming each missing table and incompatible
    /// column).
    #[arg(long, conflicts_with = "server_version")]
    pub check: bool,
    /// Print DDL for this server version (e.g. 18.16 or 25.8) instead of asking the
    /// configured server.
    #[arg(long, value_name = "X.Y")]
    pub server_version: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // clap asks for -c unless --server-version is given: that DDL needs no file.
    let cfg = match args.config.as_deref().map(crate::config::load).transpose() {
        Ok(c) => c,
        Err(e) => {
            eprint!("{e}");
            return Ok(ExitCode::from(1));
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let ch = cfg.and_then(|c| c.clickhouse.clone());
    if let Some(v) = &args.server_version {
        let version = sink::schema::ServerVersion::parse(v)
            .ok_or_else(|| anyhow::anyhow!("--server-version {v:?}: expected X.Y[.Z]"))?;
        print_ddl(&ch.unwrap_or_default(), version);
        return Ok(ExitCode::SUCCESS);
    }
    let file = args.config.unwrap_or_default();
    let Some(ch) = ch else {
        // --apply and --check need the server itself: --server-version, which
        // prints without one, cannot go with them.
        let how = match (args.apply, args.check) {
            (true, _) => ": --apply needs the server (add [clickhouse] with its url)",
            (_, true) => ": --check needs the server (add [clickhouse] with its url)",
            _ => "; use --server-version X.Y to print the DDL",
        };
        anyhow::bail!("{}: no [clickhouse] section{how}", file.display());
    };
    rt.block_on(async {
        if args.apply {
            match sink::schema::apply(&ch).await {
                Ok(applied) => {
                    for a in applied {
                        if a.created.is_empty() {
                            println!(
                                "{} (ClickHouse {}): schema OK, nothing created",
                                a.url, a.version
                            );
                        } else {
                            println!(
                                "{} (ClickHouse {}): created {}; schema OK",
                                a.url,
                                a.version,
                                a.created.join(", ")
                            );
                        }
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e @ sink::SchemaError::Incompatible { .. }) => {
                    eprintln!("netpoller: {e}");
                    Ok(ExitCode::from(1))
                }
                Err(e) => Err(e.into()),
            }
        } else if args.check {
            match sink::schema::verify(&ch).await {
                Ok(()) => {
                    println!("schema OK");
                    Ok(ExitCode::SUCCESS)
                }
                Err(e @ sink::SchemaError::Incompatible { .. }) => {
                    eprintln!("netpoller: {e}");
                    Ok(ExitCode::from(1))
                }
                Err(e) => Err(e.into()),
            }
        } else {
            let url = ch.endpoints().into_iter().next().unwrap_or_default();
            let asked = sink::schema::server_version(&ch, &url);
            let version = sink::schema::within_request_timeout(&ch, &url, asked)
                .await
                .map_err(|e| {
                    anyhow::anyhow!("{e}\n(use --server-version X.Y to print DDL without a server)")
                })?;
            println!(
                "-- DDL for ClickHouse {version} at {}",
                sink::config::redact_url(&url)
            );
            print_ddl(&ch, version);
            Ok(ExitCode::SUCCESS)
        }
    })
}

fn print_ddl(ch: &sink::ClickHouseConfig, version: sink::schema::ServerVersion) {
    for stmt in sink::schema::ddl(ch, version) {
        println!("{stmt};\n");
    }
}

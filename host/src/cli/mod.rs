//! Command-line interface: argument parsing and the commands' glue. Each
//! command lives in its own module.

mod dev;
mod plugin;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// The provisioner name a host answers to unless told otherwise
/// (`wasmprov run --provisioner-name`).
const DEFAULT_PROVISIONER_NAME: &str = "wasmprov.io/host";

/// A Kubernetes dynamic volume provisioner whose storage backends are
/// sandboxed WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "wasmprov", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the provisioner host against a cluster (in a pod, or with a kubeconfig).
    Run(run::RunArgs),
    /// Try wasmprov with no cluster: a simulated API server, the host and the
    /// hostpath plugin, with sample classes and claims.
    Dev(dev::DevArgs),
    /// Work with a plugin component locally, without a cluster.
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
}

/// Options of every command, listed after each subcommand's own options
/// under their own heading in `--help`.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Logging")]
pub struct LogArgs {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "WASMPROV_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Log filter, e.g. `info` or `wasmprov=debug,plugin=trace` [default:
    /// info; warn for `dev`, whose console already says what happens].
    #[arg(long, global = true, env = "WASMPROV_LOG")]
    pub log: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Options shared by every command that loads plugins.
#[derive(Debug, Clone, Args)]
pub struct RuntimeArgs {
    /// Sandbox policy file (YAML); without it plugins get the default limits,
    /// no directories and no network.
    #[arg(long, value_name = "FILE", env = "WASMPROV_POLICY")]
    pub policy: Option<PathBuf>,
    /// Directory for compiled components, so the next load skips compilation.
    #[arg(
        long,
        value_name = "DIR",
        env = "WASMPROV_CACHE_DIR",
        conflicts_with = "no_cache"
    )]
    pub cache_dir: Option<PathBuf>,
    /// Compile every time; keep nothing on disk.
    #[arg(long)]
    pub no_cache: bool,
}

/// `$XDG_CACHE_HOME/wasmprov/compiled`, else `~/.cache/wasmprov/compiled`.
pub fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("wasmprov").join("compiled"))
}

/// Sets up `tracing` on stderr (stdout is reserved for command output).
pub fn init_logging(cli: &Cli) {
    use tracing_subscriber::EnvFilter;
    let args = &cli.log;
    // notify's info lines (e.g. a watch on a directory that was just
    // removed) say nothing an operator can act on.
    let default = match cli.command {
        Command::Dev(_) => "warn",
        _ => "info,notify=warn",
    };
    let wanted = args.log.as_deref().unwrap_or(default);
    let filter = EnvFilter::try_new(wanted).unwrap_or_else(|e| {
        eprintln!("warning: invalid --log filter {wanted:?} ({e}); using \"{default}\"");
        EnvFilter::new(default)
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match args.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(args) => run::run(args).await.map(|()| ExitCode::SUCCESS),
        Command::Dev(args) => dev::run(args).await,
        Command::Plugin(cmd) => plugin::run(cmd).await,
    }
}

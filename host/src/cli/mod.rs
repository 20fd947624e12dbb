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
/// The name node hosts (`wasmprov run --node-name`) answer to unless told
/// otherwise: a DNS subdomain without `/`, as a CSIDriver's name must be.
const DEFAULT_NODE_PROVISIONER_NAME: &str = "node.wasmprov.io";

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
    Run(Box<run::RunArgs>),
    /// Try wasmprov with no cluster: a simulated API server, the host and the
    /// hostpath plugin, with sample classes and claims.
    Dev(dev::DevArgs),
    /// Work with a plugin component locally, without a cluster.
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Compiles one component within a budget, for the host (internal).
    #[command(name = "__compile-component", hide = true)]
    CompileComponent(CompileComponentArgs),
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
    /// Memory one plugin's compilation may use (it runs in a child process);
    /// a component needing more is refused and the previous version keeps
    /// serving. Counts toward the pod's memory limit while it runs.
    #[arg(long, value_name = "QUANTITY", default_value = "512Mi", value_parser = parse_memory, env = "WASMPROV_COMPILE_MEMORY_LIMIT")]
    pub compile_memory_limit: u64,
    /// Time one plugin's compilation may take.
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = humantime::parse_duration, env = "WASMPROV_COMPILE_TIMEOUT")]
    pub compile_timeout: std::time::Duration,
    /// The program run as `PROGRAM __compile-component` to compile plugins
    /// [default: this wasmprov binary]; for hosts embedded in another
    /// program (the tests).
    #[arg(long, value_name = "PROGRAM", hide = true, env = "WASMPROV_COMPILER")]
    pub compiler: Option<PathBuf>,
}

impl RuntimeArgs {
    /// The runtime these options describe: the compile cache, and the
    /// compiler child (this very program) with its budget.
    pub fn runtime_config(&self) -> anyhow::Result<crate::runtime::RuntimeConfig> {
        use anyhow::Context;
        let cache_dir = if self.no_cache {
            None
        } else {
            self.cache_dir.clone().or_else(default_cache_dir)
        };
        let compiler = match &self.compiler {
            Some(program) => program.clone(),
            None => std::env::current_exe().context(
                "cannot find the wasmprov binary, which compiles plugins in a child process",
            )?,
        };
        Ok(crate::runtime::RuntimeConfig {
            cache_dir,
            compile_budget: Some(crate::runtime::compile::CompileBudget {
                compiler,
                memory_limit: self.compile_memory_limit,
                timeout: self.compile_timeout,
            }),
            ..crate::runtime::RuntimeConfig::default()
        })
    }
}

/// A memory quantity of at least 64Mi (a compiler needs that much).
fn parse_memory(text: &str) -> Result<u64, String> {
    let bytes = crate::quantity::parse_bytes(text).map_err(|e| e.to_string())?;
    if bytes < 64 << 20 {
        return Err(format!("{text} is below the 64Mi a compiler needs"));
    }
    Ok(bytes)
}

/// The compiler child's arguments (`runtime::compile`): not for people.
#[derive(Debug, Args)]
pub struct CompileComponentArgs {
    #[arg(long)]
    memory_limit: u64,
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
        Command::Run(args) => run::run(*args).await.map(|()| ExitCode::SUCCESS),
        Command::Dev(args) => dev::run(args).await,
        Command::Plugin(cmd) => plugin::run(cmd).await,
        Command::CompileComponent(args) => Ok(crate::runtime::compile_child(args.memory_limit)),
    }
}

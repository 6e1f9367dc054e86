//! `weftd`: the weft node agent and its operator commands.
#![forbid(unsafe_code)]

use anyhow::Context as _;
use clap::Parser as _;
use weft::cli::{
    self, Cli, Command, EndpointCommand, IpcacheCommand, LogFormat, Output, PluginCommand,
};

fn main() -> anyhow::Result<()> {
    // Before any thread starts (setting the environment is not thread-safe): the
    // WireGuard control crate would start this program as root when a device's socket
    // is missing; weft starts its own helper, never another.
    std::env::set_var(
        "WG_USERSPACE_IMPLEMENTATION",
        weft::wireguard::NO_USERSPACE_IMPLEMENTATION,
    );
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match cli.command {
        Command::Run(args) if args.print_written_paths => {
            for p in args.into_config().written_paths() {
                println!("{}\t{}", p.path.display(), p.what);
            }
        }
        Command::Run(args) => {
            weft::agent::run(args.into_config(), shutdown_signal()).await?;
        }
        Command::Status(cmd) => {
            let args = &cmd.args;
            let report = if cmd.wait {
                wait_ready(&args.state_dir, cmd.timeout).await?
            } else {
                weft::api::fetch_status(&args.state_dir)
                    .await
                    .context("is weftd running with this --state-dir?")?
            };
            match args.output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
                Output::Text => print!("{}", report),
            }
        }
        Command::Ipcache(IpcacheCommand::List(args)) => {
            let rows = weft::api::fetch_ipcache(&args.state_dir)
                .await
                .context("is weftd running with this --state-dir?")?;
            match args.output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
                Output::Text => print!("{}", weft::api::IpCacheTable(&rows)),
            }
        }
        Command::Ipcache(IpcacheCommand::Map(args)) => {
            let dump = weft::datapath::read_ipcache(&args.bpf_root, args.generation)?;
            match args.output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&dump)?),
                Output::Text => print!("{}", dump),
            }
        }
        Command::Endpoint(EndpointCommand::List(args)) => {
            let rows = weft::api::fetch_endpoints(&args.state_dir)
                .await
                .context("is weftd running with this --state-dir?")?;
            match args.output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
                Output::Text => print!("{}", weft::api::EndpointTable(&rows)),
            }
        }
        Command::Plugin(PluginCommand::Keygen { out }) => {
            let public = weft::plugins::generate_signing_key(&out)?;
            println!("{}", hex::encode(public.as_bytes()));
        }
        Command::Plugin(PluginCommand::Public { key }) => {
            let key = weft::plugins::read_signing_key(&key)?;
            println!("{}", hex::encode(key.verifying_key().as_bytes()));
        }
        Command::Plugin(PluginCommand::Seal { manifest, key }) => {
            let key = key
                .as_deref()
                .map(weft::plugins::read_signing_key)
                .transpose()?;
            let m = weft::plugins::seal(&manifest, key.as_ref())?;
            println!(
                "{}: {} {} sha256 {}{}",
                manifest.display(),
                m.name,
                m.version,
                m.sha256,
                if m.signature.is_some() {
                    ", signed"
                } else {
                    ""
                }
            );
        }
        Command::Plugin(PluginCommand::New { name, dir }) => {
            let dir = weft::plugin_tool::scaffold::new_plugin(&dir, &name)?;
            println!("plugin crate {name} created in {}", dir.display());
            println!(
                "next: cd {} && cargo test && weftd plugin build",
                dir.display()
            );
        }
        Command::Plugin(PluginCommand::Build { dir, cargo }) => {
            let (path, m) = weft::plugin_tool::build::build(&dir, &cargo)?;
            println!(
                "built {}: {} {} wit {} sha256 {}",
                path.display(),
                m.name,
                m.version,
                m.wit.as_deref().unwrap_or("?"),
                m.sha256
            );
            println!("next: weftd plugin sign {} --key KEY", path.display());
        }
        Command::Plugin(PluginCommand::Test {
            manifest,
            recording,
        }) => {
            let (m, report) = weft::plugin_tool::test_plugin(&manifest, &recording)?;
            print!("{}", weft::plugin_tool::render_replay(&m, &report));
            if !report.differences.is_empty() || !report.failures.is_empty() {
                std::process::exit(1);
            }
        }
        Command::Plugin(PluginCommand::Sign { manifest, key }) => {
            let key = weft::plugins::read_signing_key(&key)?;
            let m = weft::plugins::seal(&manifest, Some(&key))?;
            println!("{}: {} {} signed", manifest.display(), m.name, m.version);
            print!("{}", weft::plugin_tool::render_signed_fields(&m));
        }
        Command::Plugin(PluginCommand::Verify {
            manifest,
            trust_policy,
            trusted_keys,
            allow_unsigned,
        }) => {
            let verdict = weft::plugin_tool::verify_plugin(
                &manifest,
                trust_policy.as_deref(),
                trusted_keys.as_deref(),
                allow_unsigned,
            )?;
            print!("{verdict}");
            if !verdict.accepted {
                std::process::exit(1);
            }
        }
        #[cfg(feature = "lab")]
        Command::Lab(command) => lab(command).await?,
        Command::ClusterConfig(args) => {
            cli::config::write_cluster_config(&args).await?;
            println!(
                "cluster config of {} (id {}) written",
                args.cluster_name, args.cluster_id
            );
        }
    }
    Ok(())
}

/// `weftd lab …`, in a weftd built with the `lab` feature.
#[cfg(feature = "lab")]
async fn lab(command: weft::cli::LabCommand) -> anyhow::Result<()> {
    use weft::cli::{LabCommand, LabScenario};
    match command {
        LabCommand::Up {
            clusters,
            nodes,
            pods,
            plugins,
            at,
        } => {
            let spec = weft::lab::spec::Spec {
                name: at.name.clone(),
                clusters,
                nodes,
                pods,
                dir: at.path(),
            };
            let programs = weft::lab::up::Programs::beside_this(plugins)?;
            let display = if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
                weft::lab::Display::Live
            } else {
                weft::lab::Display::Plain
            };
            let fine = weft::lab::up(&spec, &programs, display, &mut std::io::stdout())
                .await
                .with_context(|| {
                    format!(
                        "the lab is left as it is: `weftd lab down --name {} --dir {}` removes it",
                        at.name,
                        at.dir.display()
                    )
                })?;
            if !fine {
                anyhow::bail!("the connectivity matrix is not as the policy says");
            }
        }
        LabCommand::Scenario {
            scenario,
            control,
            plot,
            at,
        } => {
            let dir = at.path();
            let out = &mut std::io::stdout();
            if plot.is_some() && !matches!(scenario, LabScenario::Restart) {
                anyhow::bail!("--plot draws streams: only the restart scenario has them");
            }
            let verdict = match scenario {
                LabScenario::Restart => {
                    weft::lab::scenario::restart(&dir, control, plot.as_deref(), out).await?
                }
                LabScenario::ClusterRemovedMidSync => {
                    weft::lab::scenario::cluster_removed(&dir, control, out).await?
                }
                LabScenario::EtcdRestart => {
                    weft::lab::scenario::etcd_restart(&dir, control, out).await?
                }
                LabScenario::VendorCallback => {
                    weft::lab::scenario::vendor_callback(&dir, control, out).await?
                }
                LabScenario::PluginReload => {
                    weft::lab::scenario::plugin_reload(&dir, control, out).await?
                }
            };
            println!("{}", verdict.line);
            if !verdict.passed {
                std::process::exit(1);
            }
        }
        LabCommand::Soak {
            duration,
            every,
            sample_every,
            plot,
            csv,
            steps,
            at,
        } => {
            let weftd = std::env::current_exe()?;
            let options = weft::lab::soak::Options {
                duration,
                every,
                sample_every,
                cni: weftd.with_file_name("weft-cni"),
                kinds: steps,
                plot,
                csv,
            };
            let verdict =
                weft::lab::soak::soak(&at.path(), &options, &mut std::io::stdout()).await?;
            println!("{}", verdict.line);
            if !verdict.passed {
                std::process::exit(1);
            }
        }
        LabCommand::Status(at) => {
            print!("{}", weft::lab::status(&at.path()).await?);
        }
        LabCommand::Down(at) => {
            for line in weft::lab::down(&at.path())? {
                println!("{line}");
            }
        }
    }
    Ok(())
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// `weftd status --wait`: the status once every remote cluster is ready; an error
/// naming what is pending (or that the agent does not answer) after `timeout`.
async fn wait_ready(
    state_dir: &std::path::Path,
    timeout: std::time::Duration,
) -> anyhow::Result<weft::api::StatusReport> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let why = match weft::api::fetch_status(state_dir).await {
            Ok(report) => {
                let pending = report.pending_clusters();
                if pending.is_empty() {
                    return Ok(report);
                }
                pending.join("\n  ")
            }
            Err(e) => format!("the agent does not answer: {e}"),
        };
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "not ready after {}:\n  {why}",
                humantime::format_duration(timeout)
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

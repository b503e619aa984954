//! `distprof run`: one standalone node (no XLA, no GPU) of a multi-host probe run.
//!
//! Order of events: bind the UDP probe socket (so the published address is the bound
//! one), rendezvous over the TCP store that rank 0 serves, print the agreed context
//! digest, then hand the socket and context to the probe engine.

use anyhow::{bail, Context as _};
use distprof::config::Config;
use distprof::context::RunContext;
use distprof::kv::tcp::{ServerOptions, TcpStoreOptions};
use distprof::kv::{KvStore, MemoryStore, TcpStore, TcpStoreServer};
use distprof::rendezvous::{self, address, digest, launcher};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// This node's rank, 0..nodes; rank 0 serves the rendezvous store.
    /// Default: the launcher's (PJRT_PROCESS_INDEX, RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID).
    #[arg(long)]
    rank: Option<u32>,
    /// Number of nodes in the run.
    /// Default: the launcher's (PJRT_NUM_PROCESSES, WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS).
    #[arg(long)]
    nodes: Option<u32>,
    /// HOST:PORT of the rendezvous store, served by rank 0.
    /// Default: PJRT_COORDINATOR_ADDRESS, else MASTER_ADDR:MASTER_PORT.
    #[arg(long, value_name = "HOST:PORT")]
    rendezvous: Option<String>,
    /// JSON configuration file (fields not given keep their defaults).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Bind the probe socket to this address instead of discovering one
    /// (e.g. 127.0.0.1 for runs on one machine).
    #[arg(long, value_name = "ADDR")]
    bind: Option<IpAddr>,
    /// Override the configuration's `rendezvous_timeout_ms`.
    #[arg(long, value_name = "MS")]
    rendezvous_timeout_ms: Option<u64>,
    /// Stop after the rendezvous (check that every node agrees, without probing).
    #[arg(long)]
    rendezvous_only: bool,
    /// Skip the rendezvous and probe on this agreed run context (JSON): how a node
    /// restarted mid-run rejoins its session (the fault suite's restarted peer).
    #[arg(long, hide = true, value_name = "FILE", conflicts_with = "rendezvous_only")]
    context_file: Option<PathBuf>,
    /// How long to probe after the rendezvous.
    #[command(flatten)]
    probe: crate::cluster::node_run::ProbeArgs,
}

/// Who this node is and where the store is, after flags and environment are combined.
struct Placement {
    rank: u32,
    nodes: u32,
    /// None for a one-node run, which needs no store.
    store_addr: Option<SocketAddr>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut config = load_config(args.config.as_deref())?;
    if let Some(ms) = args.rendezvous_timeout_ms {
        config.rendezvous_timeout_ms = ms;
    }
    distprof::logging::init_logging(&config.log_filter);
    if let Some(path) = &args.context_file {
        return rejoin(path, &args, &config);
    }
    let placement = place(&args)?;
    let started = Instant::now();
    let timeout = Duration::from_millis(config.rendezvous_timeout_ms);

    let socket = bind_probe_socket(args.bind, &config)?;
    let probe_addr = socket
        .local_addr()
        .context("reading the probe socket's bound address")?;
    tracing::info!(%probe_addr, "probe socket bound");

    // Rank 0 serves the store and uses the served map directly.
    let secret = store_secret()?;
    let server = match (placement.store_addr, placement.rank) {
        (Some(addr), 0) => Some(serve_store(addr, probe_addr.ip(), secret.clone())?),
        _ => None,
    };
    let client: Box<dyn KvStore> = match placement.store_addr {
        Some(addr) => {
            // Every store call may take the whole rendezvous timeout: ranks start minutes
            // apart on real clusters, and rank 0 may be the last to come up. The
            // rendezvous bounds the total by the same deadline.
            let options = TcpStoreOptions {
                op_timeout: timeout,
                ..TcpStoreOptions::default()
            };
            Box::new(TcpStore::with_secret(addr, options, secret.unwrap_or_default()))
        }
        None => Box::new(MemoryStore::new()),
    };
    let kv: &dyn KvStore = match &server {
        Some(s) => s.store(),
        None => client.as_ref(),
    };

    let hostname = address::hostname();
    let ctx = match rendezvous::rendezvous(
        kv,
        placement.rank,
        placement.nodes,
        &config,
        probe_addr,
        &hostname,
    ) {
        Ok(ctx) => ctx,
        Err(e) => {
            if let Some(server) = &server {
                linger_until_clients_leave(
                    server,
                    timeout
                        .saturating_sub(started.elapsed())
                        .min(FAILED_MASTER_GRACE),
                );
            }
            return Err(anyhow::Error::new(e)
                .context(format!("node {}/{}", placement.rank, placement.nodes)));
        }
    };
    println!(
        "node {}/{}: context {} session {}",
        placement.rank,
        placement.nodes,
        digest::context_digest(&ctx),
        ctx.session_id
    );

    if args.rendezvous_only {
        if server.is_some() {
            // Keep serving until every node has read the context.
            let left = timeout
                .saturating_sub(started.elapsed())
                .max(Duration::from_secs(1));
            let missing = rendezvous::wait_for_acks(kv, &ctx, left);
            if !missing.is_empty() {
                tracing::warn!("nodes {missing:?} did not confirm reading the run context before rank 0 stopped serving");
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    hand_over_to_probing(ctx, placement.rank, socket, &config, server, &args.probe)
}

/// How long a rank 0 whose rendezvous failed keeps serving the store, so that the other
/// nodes read why (the abort) instead of finding the store gone.
const FAILED_MASTER_GRACE: Duration = Duration::from_secs(5);

fn linger_until_clients_leave(server: &TcpStoreServer, grace: Duration) {
    let deadline = Instant::now() + grace;
    while server.connection_count() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The one place where the rendezvous hands over to the probe engine: probes for
/// `--duration`, writes the JSONL file, prints the node's report as the last stdout line.
fn hand_over_to_probing(
    ctx: RunContext,
    rank: u32,
    socket: UdpSocket,
    config: &Config,
    store: Option<TcpStoreServer>,
    probe: &crate::cluster::node_run::ProbeArgs,
) -> anyhow::Result<ExitCode> {
    // Rank 0 keeps `store` alive while it probes (dropped at the end of this function).
    let _store = store;
    crate::cluster::node_run::probe_after_rendezvous(&ctx, rank, socket, config, probe)?;
    Ok(ExitCode::SUCCESS)
}

/// A node of an already agreed run: binds the address its own context publishes for it
/// (peers know no other) and probes; no store, no rendezvous.
fn rejoin(path: &Path, args: &Args, config: &Config) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading --context-file `{}`", path.display()))?;
    let ctx: RunContext =
        serde_json::from_str(&text).with_context(|| format!("parsing --context-file `{}` as a run context", path.display()))?;
    let Some(rank) = args.rank else {
        bail!("--context-file needs --rank: which node of the context this process is");
    };
    if ctx.node != rank {
        bail!(
            "--rank {rank}: the context in `{}` is node {}'s (each node has its own context file); pass --rank {} or node {rank}'s file",
            path.display(),
            ctx.node,
            ctx.node
        );
    }
    let Some(me) = ctx.me() else {
        bail!("the context in `{}` does not list node {rank} itself in `nodes`; write it with the node's own address", path.display());
    };
    let socket = UdpSocket::bind(me.probe_addr)
        .with_context(|| format!("cannot bind the UDP probe socket to {} (node {rank}'s address in the context)", me.probe_addr))?;
    hand_over_to_probing(ctx, rank, socket, config, None, &args.probe)
}

fn place(args: &Args) -> anyhow::Result<Placement> {
    let env = launcher::detect(|k| std::env::var(k).ok()).map_err(anyhow::Error::msg)?;
    let launched = env.rank_and_size;
    let rank = args.rank.or(launched.map(|(r, _, _)| r));
    let nodes = args.nodes.or(launched.map(|(_, n, _)| n));
    let (Some(rank), Some(nodes)) = (rank, nodes) else {
        bail!(
            "rank and node count unknown: pass --rank and --nodes, or run under a launcher that sets them \
             (PJRT_PROCESS_INDEX/PJRT_NUM_PROCESSES, RANK/WORLD_SIZE, OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE, SLURM_PROCID/SLURM_NTASKS)"
        );
    };
    if let Some((_, _, source)) = launched {
        tracing::info!("launcher environment: {source}");
    }
    if nodes == 0 {
        bail!("--nodes 0: a run has at least one node");
    }
    if rank >= nodes {
        bail!(
            "rank {rank} is out of range for {nodes} nodes; ranks run from 0 to {}",
            nodes - 1
        );
    }
    let spec = args
        .rendezvous
        .clone()
        .map(|s| (s, "--rendezvous"))
        .or(env.rendezvous);
    let store_addr = match (nodes, spec) {
        (1, _) => None,
        (_, None) => bail!(
            "no rendezvous address for a {nodes}-node run: pass --rendezvous HOST:PORT (rank 0 serves it), \
             or set PJRT_COORDINATOR_ADDRESS or MASTER_ADDR and MASTER_PORT"
        ),
        (_, Some((spec, source))) => Some(resolve(&spec, source)?),
    };
    Ok(Placement {
        rank,
        nodes,
        store_addr,
    })
}

fn resolve(spec: &str, source: &str) -> anyhow::Result<SocketAddr> {
    let mut addrs = spec
        .to_socket_addrs()
        .with_context(|| format!("{source} `{spec}` is not HOST:PORT that resolves (example: node01:29500 or [fd00::1]:29500)"))?;
    addrs
        .next()
        .with_context(|| format!("{source} `{spec}` resolves to no address"))
}

/// The variable that holds the store secret, for clusters whose rendezvous port is
/// reachable by others: every rank must set the same value.
const STORE_SECRET_VAR: &str = "DISTPROF_STORE_SECRET";

fn store_secret() -> anyhow::Result<Option<String>> {
    let Some(value) = std::env::var_os(STORE_SECRET_VAR) else { return Ok(None) };
    let Ok(value) = value.into_string() else {
        bail!("{STORE_SECRET_VAR} is not valid UTF-8; set it to the same printable secret on every rank");
    };
    if value.len() > distprof::kv::tcp::MAX_SECRET_BYTES {
        bail!(
            "{STORE_SECRET_VAR} is {} bytes; use a secret of at most {} bytes",
            value.len(),
            distprof::kv::tcp::MAX_SECRET_BYTES
        );
    }
    Ok((!value.is_empty()).then_some(value))
}

/// Serves the store on the rendezvous port, on one interface only: the rendezvous address
/// itself when it is an address of this host (loopback included: runs on one machine stay
/// private); otherwise (a NAT address, or a name that resolves to an address this host
/// does not have) the address of the probe interface, the one the job uses.
fn serve_store(addr: SocketAddr, probe_ip: IpAddr, secret: Option<String>) -> anyhow::Result<TcpStoreServer> {
    let options = ServerOptions { secret, ..ServerOptions::default() };
    let server = match TcpStoreServer::bind_with(addr, options.clone()) {
        Ok(server) => server,
        Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable && !addr.ip().is_loopback() => {
            let bind = SocketAddr::new(probe_ip, addr.port());
            tracing::info!("rendezvous address {addr} is not an address of this host; serving the store on the probe interface's {bind}");
            TcpStoreServer::bind_with(bind, options).with_context(|| {
                format!("rank 0 cannot serve the rendezvous store on {bind} (port in use? choose another port)")
            })?
        }
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!(
                "rank 0 cannot serve the rendezvous store on {addr} (port in use? choose another port)"
            )))
        }
    };
    tracing::info!("rendezvous store serving on {}", server.local_addr());
    Ok(server)
}

fn bind_probe_socket(bind: Option<IpAddr>, config: &Config) -> anyhow::Result<UdpSocket> {
    let addr = match bind {
        Some(ip) if ip.is_unspecified() => {
            bail!("--bind {ip} would publish an address peers cannot reach; give this host's address on the probe network")
        }
        Some(ip) => SocketAddr::new(ip, config.probe_port),
        None => {
            let chosen = address::discover(&config.interface, config.probe_port)?;
            tracing::info!(
                "probe address {} on {} (from {})",
                chosen.addr,
                chosen.interface,
                chosen.source
            );
            chosen.addr
        }
    };
    UdpSocket::bind(addr).with_context(|| {
        format!("cannot bind the UDP probe socket to {addr}; set `probe_port` to 0 for any free port, or --bind another address")
    })
}

/// The effective configuration: defaults < file (`--config`, else `XLA_DIST_PROF_CONFIG`)
/// < environment variables, every problem reported at once; a `--config` file that cannot
/// be read is blamed on `--config`.
fn load_config(file: Option<&Path>) -> anyhow::Result<Config> {
    let env = |var: &str| std::env::var(var).ok();
    let loaded = match file {
        Some(path) => distprof::config::load_with_file(path, "--config", &env),
        None => distprof::config::load(&env),
    };
    match loaded {
        Ok(effective) => Ok(effective.config),
        Err(errors) => bail!("invalid configuration:\n{errors}"),
    }
}

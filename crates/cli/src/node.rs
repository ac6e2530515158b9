//! The node agent's commands: `agent`, `status`, `events`, `check`.

use anyhow::{bail, Context, Result};
use clap::Args;
use overbook_agent::api;
use overbook_agent::daemon::{self, DEFAULT_SOCKET};
use overbook_agent::{AgentConfig, NodeStatus};
use overbook_linux::{FreezerSupport, HostSupport};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The agent's TOML config (see docs/agent.md); built-in defaults when
    /// not given: containers under the `overbook` cgroup, constraint-
    /// thrashing detection with a 3 s tolerance, kill.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Where the local API listens (a unix socket, made root-only).
    #[arg(long, default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Check the config and exit.
    #[arg(long)]
    check_config: bool,
    /// This node's name in the API server, over the config's `[kubernetes]
    /// node_name`: one config (a ConfigMap) for every node of a DaemonSet,
    /// each agent given its own node's name, e.g. `--node-name $(NODE_NAME)`
    /// in the container's args with NODE_NAME from the downward API
    /// (`spec.nodeName`); the config's own node_name may then be left out.
    /// The config must have a [kubernetes] section.
    #[arg(long, value_name = "NAME")]
    node_name: Option<String>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The agent's API socket.
    #[arg(long, default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Print the agent's JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// The agent's API socket.
    #[arg(long, default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Keep printing events as they happen, until interrupted.
    #[arg(long, short)]
    follow: bool,
    /// Print each event as the agent's JSON line.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct CheckArgs {}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// production (starts at once), best-effort (queued until it fits) or critical.
    #[arg(long)]
    class: overbook_core::Class,
    /// The container's name under the node's root (letters, digits, - _ .).
    #[arg(long)]
    name: String,
    /// The task's expected memory peak (`512MiB`, `2G`): what the launcher
    /// charges until the job has history.
    #[arg(long)]
    mem_peak: Option<String>,
    /// The job whose finished tasks profile this one (default: the name).
    #[arg(long)]
    job: Option<String>,
    /// The container's share for the `weighted` reclaimer, 1..10000
    /// (default: its class rule's, else 1).
    #[arg(long)]
    weight: Option<u32>,
    /// The agent's API socket.
    #[arg(long, default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

impl AgentArgs {
    /// Whether it only checks its config and prints it (no daemon runs).
    pub fn only_checks(&self) -> bool {
        self.check_config
    }
}

#[derive(Debug, Args)]
pub struct PreemptArgs {
    /// The container's name under the node's root.
    name: String,
    /// kill (work lost, restarted), freeze (memory kept), freeze-and-swap-out
    /// (memory pushed to swap), checkpoint (CRIU; incremental on a pre-dump
    /// when there is one) or full-checkpoint.
    #[arg(long, default_value = "checkpoint")]
    how: String,
    /// Return once a checkpoint's dump began instead of when it ended (the
    /// agent dumps off its loop either way; its end is a `preempted` event,
    /// see `overbook events`).
    #[arg(long)]
    no_wait: bool,
    /// The agent's API socket.
    #[arg(long, default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
}

#[derive(Debug, Args)]
pub struct AdoptArgs {
    /// The task's name (its directory in the shared image store).
    name: String,
    /// The agent's API socket.
    #[arg(long, default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Seconds each phase is measured (the agent's phase runs twice as long).
    #[arg(long, default_value_t = 8)]
    phase_seconds: u64,
    /// Where production's working-set file is written (must be a disk, not tmpfs).
    #[arg(long, default_value = "/var/tmp")]
    scratch: PathBuf,
    /// Do not add a 512 MiB swap file for the demo when the machine has no swap.
    #[arg(long)]
    no_swap: bool,
}

#[derive(Debug, Args)]
pub struct WorkloadArgs {
    /// `anon SIZE [SECONDS] [--ramp RATE] [--idle]` or `file PATH SIZE
    /// [SECONDS] [--idle] [--fresh RATE]`.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

pub fn agent(args: AgentArgs) -> Result<()> {
    let config = load_config(args.config.as_deref(), args.node_name.as_deref())?;
    if args.check_config {
        println!(
            "# {} is valid; the agent would run with this (defaults included):\n",
            args.config.as_ref().map_or("the built-in default".into(), |p| p.display().to_string())
        );
        print!("{}", config.effective_toml());
        return Ok(());
    }
    if !overbook_linux::process::is_root() {
        bail!("the agent manages cgroups and must run as root (try `sudo overbook agent`)");
    }
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .context("installing signal handlers")?;
    }
    daemon::run(&config, &args.socket, &stop, |line| eprintln!("{line}"))?;
    eprintln!("overbook agent: stopped");
    Ok(())
}

/// The agent's config: the file's (else the built-in default), with
/// `--node-name` as its `[kubernetes] node_name`. A file whose only fault is
/// a `[kubernetes]` without `node_name` is fine when `--node-name` gives it
/// (one ConfigMap for every node of a DaemonSet).
fn load_config(file: Option<&Path>, node_name: Option<&str>) -> Result<AgentConfig> {
    let Some(path) = file else {
        if let Some(name) = node_name {
            bail!(
                "--node-name {name}: the built-in default config has no [kubernetes] section; \
                 give a config with one (--config FILE; see docs/agent.md, \"Kubernetes nodes\")"
            );
        }
        return Ok(AgentConfig::default());
    };
    let Some(name) = node_name else { return Ok(AgentConfig::load(path)?) };
    let name = name.trim();
    if name.is_empty() {
        bail!("--node-name: empty; give this node's name in the API server");
    }
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    let origin = path.display().to_string();
    let mut config = match AgentConfig::parse(&text, &origin) {
        Ok(config) => config,
        Err(first) => {
            // `[kubernetes]` without its node_name: give it the flag's.
            let mut table: toml::Table = match text.parse() {
                Ok(t) => t,
                Err(_) => return Err(first.into()),
            };
            match table.get_mut("kubernetes") {
                Some(toml::Value::Table(k)) if !k.contains_key("node_name") => {
                    k.insert("node_name".into(), toml::Value::String(name.to_string()));
                }
                _ => return Err(first.into()),
            }
            let patched = toml::to_string(&table).context("writing the config")?;
            AgentConfig::parse(&patched, &origin)?
        }
    };
    let Some(kubernetes) = config.kubernetes.as_mut() else {
        bail!(
            "--node-name {name}: {origin} has no [kubernetes] section, so the agent reads no \
             pods from an API server and has no node name to set (see docs/agent.md, \
             \"Kubernetes nodes\")"
        );
    };
    kubernetes.node_name = name.to_string();
    Ok(config)
}

pub fn status(args: StatusArgs) -> Result<()> {
    let body = api::get(&args.socket, "/v1/status")?;
    if args.json {
        println!("{body}");
        return Ok(());
    }
    let s: NodeStatus =
        serde_json::from_str(&body).context("the agent's status is not valid JSON")?;
    print!("{}", status_table(&s));
    Ok(())
}

fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / f64::from(1u32 << 20))
}

fn status_table(s: &NodeStatus) -> String {
    let mut out = format!(
        "node {}: capacity {}, available {}, swap {} free of {}; {} preempted, {} resumed\n\n",
        s.root,
        mib(s.capacity),
        mib(s.available),
        mib(s.swap_free),
        mib(s.swap_total),
        s.preemptions,
        s.resumes
    );
    out += &format!(
        "{:<24} {:<12} {:>10} {:>10} {:>10} {:>10} {:>6} {:>6} {:<8}\n",
        "CONTAINER", "CLASS", "USAGE", "SWAP", "MAJFLT/s", "REFAULT/s", "PSI10", "PROCS", "STATE"
    );
    for c in &s.containers {
        out += &format!(
            "{:<24} {:<12} {:>10} {:>10} {:>10.0} {:>10.0} {:>6} {:>6} {:<8}\n",
            c.name,
            c.class,
            mib(c.usage),
            c.swap.map_or("-".into(), mib),
            c.major_faults_per_s,
            c.refaults_per_s,
            c.pressure_some_avg10.map_or("-".into(), |p| format!("{p:.1}")),
            c.processes,
            c.state
        );
    }
    if s.containers.is_empty() {
        out += "(no containers under the node's root yet)\n";
    }
    out
}

pub fn events(args: EventsArgs) -> Result<()> {
    let mut after = 0u64;
    loop {
        let wait = if args.follow { 25 } else { 0 };
        let body = api::get(&args.socket, &format!("/v1/events?after={after}&wait={wait}"))?;
        for line in body.lines() {
            let e: serde_json::Value =
                serde_json::from_str(line).with_context(|| format!("bad event line {line:?}"))?;
            after = after.max(e["seq"].as_u64().unwrap_or(after));
            if args.json {
                println!("{line}");
            } else {
                println!(
                    "{:>9.3}s {:<16} {:<28} {}",
                    e["at"].as_f64().unwrap_or(0.0),
                    e["kind"].as_str().unwrap_or("?"),
                    e["container"].as_str().unwrap_or("-"),
                    e["detail"]
                );
            }
        }
        if !args.follow {
            return Ok(());
        }
    }
}

pub fn check(_args: CheckArgs) -> Result<()> {
    let h = HostSupport::probe();
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    let mut rows: Vec<(&str, String, &str)> = Vec::new();
    match &h.memory {
        Some(m) => rows.push((
            "memory controller",
            format!("cgroup {:?} at {}", m.version, m.mount.display()),
            "",
        )),
        None => rows.push((
            "memory controller",
            "none".into(),
            "the agent cannot run here: try `overbook sim`",
        )),
    }
    rows.push((
        "PSI (system)",
        yes_no(h.psi_system).into(),
        if h.psi_system { "" } else { "woken by the sampling timer only (100 ms)" },
    ));
    rows.push((
        "PSI (per cgroup)",
        yes_no(h.psi_per_cgroup).into(),
        if h.psi_per_cgroup { "" } else { "thrashing seen from faults and refaults only" },
    ));
    let swap = h.swap_total.map_or("unknown".into(), |s| format!("{} MiB", s >> 20));
    rows.push((
        "swap",
        swap,
        if h.swap_total.unwrap_or(0) > 0 {
            ""
        } else {
            "anonymous memory cannot be pushed out; freezing keeps it resident"
        },
    ));
    rows.push((
        "cgroup.kill",
        yes_no(h.cgroup_kill).into(),
        if h.cgroup_kill { "" } else { "kills signal every member with pidfd_send_signal" },
    ));
    let freezer = match &h.freezer {
        FreezerSupport::V2 => "cgroup.freeze".to_string(),
        FreezerSupport::V1 { mount } => format!("v1 freezer at {}", mount.display()),
        FreezerSupport::None => "none".to_string(),
    };
    let no_freezer = matches!(h.freezer, FreezerSupport::None);
    rows.push((
        "freezer",
        freezer,
        if no_freezer { "suspend preemptors fall back to kill" } else { "" },
    ));
    rows.push((
        "pidfd",
        yes_no(h.pidfd).into(),
        if h.pidfd { "" } else { "kills by pid (racy with pid reuse)" },
    ));
    rows.push((
        "process_mrelease",
        yes_no(h.process_mrelease).into(),
        if h.process_mrelease { "" } else { "a victim's memory comes back when it exits" },
    ));
    let criu = overbook_linux::criu::Criu::probe();
    let here = match (&criu.binary, &criu.check) {
        (None, _) => "not installed".to_string(),
        (Some(path), Ok(())) => {
            format!("{} {} (criu check: ok)", path.display(), criu.version.as_deref().unwrap_or(""))
        }
        (Some(path), Err(why)) => format!("{} (criu check failed: {why})", path.display()),
    };
    rows.push((
        "CRIU",
        here,
        if criu.usable() {
            ""
        } else {
            "checkpoints become freeze-and-swap-out where there is swap, else kill"
        },
    ));
    rows.push((
        "soft-dirty pages",
        match &criu.mem_dirty_track {
            Ok(()) => "yes".to_string(),
            Err(why) => format!("no ({why})"),
        },
        if criu.incremental() { "" } else { "every checkpoint dumps all of a task's memory" },
    ));
    println!("{:<18} {:<50} WITHOUT IT", "FEATURE", "HERE");
    for (name, here, without) in rows {
        println!("{name:<18} {here:<50} {without}");
    }
    for n in &h.notes {
        println!("note: {n}");
    }
    Ok(())
}

pub fn demo(args: DemoArgs) -> Result<()> {
    if !overbook_linux::process::is_root() {
        bail!(
            "the demo makes a node cgroup and runs real workloads in it, so it needs root \
             (try `sudo overbook demo`); without root, `overbook sim` shows the same policies \
             on a simulated cluster"
        );
    }
    if args.phase_seconds == 0 {
        bail!("--phase-seconds must be at least 1");
    }
    const MIB: u64 = 1 << 20;
    let plan = overbook_lab::demo::DemoPlan {
        workload: std::env::current_exe().context("finding the overbook binary")?,
        workload_prefix: vec!["workload".into()],
        node: 256 * MIB,
        production_working_set: 150 * MIB,
        hogs: vec![64 * MIB, 64 * MIB],
        phase: std::time::Duration::from_secs(args.phase_seconds),
        scratch: args.scratch,
        swap: (!args.no_swap).then_some(512 * MIB),
    };
    let s = overbook_lab::demo::run(&plan, |line| println!("{line}"))
        .map_err(|e| anyhow::anyhow!("demo: {e}"))?;
    let alone = s.alone.mean;
    let pct = |x: f64| if alone > 0.0 { 100.0 * x / alone } else { 0.0 };
    println!();
    println!(
        "{:<36} {:>12} {:>9} {:>24}",
        "PRODUCTION THROUGHPUT", "reads/s", "of alone", "each second (of alone)"
    );
    let row = |what: &str, x: &overbook_lab::demo::Spread| {
        println!(
            "{what:<36} {:>12.0} {:>8.0}% {:>15}  ({} s)",
            x.mean,
            pct(x.mean),
            format!("{:.0}%..{:.0}%", pct(x.lo), pct(x.hi)),
            x.seconds
        );
    };
    row("alone", &s.alone);
    row("beside one hog that fits", &s.beside_one);
    row("squeezed, no agent", &s.squeezed);
    row("squeezed, with the agent (whole)", &s.with_agent);
    if let Some(a) = &s.after_preemption {
        row("  after its preemption", a);
    }
    println!();
    let after = s
        .after_preemption
        .as_ref()
        .map_or(String::new(), |a| format!(" ({:.0}% once it had preempted)", pct(a.mean)));
    println!(
        "What this shows: squeezed by best-effort memory with no one acting, production \
         read {:.0}% of what it reads alone; with the agent it read {:.0}%{after}, against \
         {:.0}% beside the one hog that fits (the most a preemption can give back while \
         best-effort work runs). The last column is how far each second's rate strayed: a \
         difference smaller than that is noise, and longer phases (--phase-seconds) narrow it.",
        pct(s.squeezed.mean),
        pct(s.with_agent.mean),
        pct(s.beside_one.mean),
    );
    if let Some(size) = s.swap_added {
        println!("swap: {} MiB added for the demo, removed again", size / MIB);
    }
    println!(
        "preempted: {}",
        if s.preempted.is_empty() { "nobody".into() } else { s.preempted.join(", ") }
    );
    println!("everything the demo made has been removed");
    Ok(())
}

pub fn workload(args: WorkloadArgs) -> Result<()> {
    use overbook_lab::workload::{run, Workload, USAGE};
    let w = Workload::parse(&args.args)
        .map_err(|e| anyhow::anyhow!("{e}\nusage: overbook workload {USAGE}"))?;
    run(&w, &mut std::io::stdout().lock())?;
    Ok(())
}

pub fn adopt(args: AdoptArgs) -> Result<()> {
    let order = overbook_agent::api::AdoptRequest { name: args.name };
    let reply = api::post(&args.socket, "/v1/adopt", &serde_json::to_string(&order)?)?;
    let reply: serde_json::Value =
        serde_json::from_str(&reply).context("the agent's answer is not valid JSON")?;
    println!(
        "adopted {} from {} ({}): restored here when it fits",
        reply["adopted"].as_str().unwrap_or("?"),
        reply["from"].as_str().unwrap_or("?"),
        reply["image"].as_str().unwrap_or("?")
    );
    Ok(())
}

pub fn preempt(args: PreemptArgs) -> Result<()> {
    let order = overbook_agent::tasks::PreemptRequest {
        name: args.name,
        how: args.how,
        wait: !args.no_wait,
    };
    let reply = api::post(&args.socket, "/v1/preempt", &serde_json::to_string(&order)?)?;
    let reply: serde_json::Value =
        serde_json::from_str(&reply).context("the agent's answer is not valid JSON")?;
    let events = reply["events"].as_array().cloned().unwrap_or_default();
    for e in &events {
        let detail = &e["detail"];
        let what = match e["kind"].as_str().unwrap_or("?") {
            "preempted" => format!(
                "preempted ({}){}",
                detail["how"].as_str().unwrap_or("?"),
                detail["fallback"].as_str().map(|f| format!(": {f}")).unwrap_or_default()
            ),
            other => format!("{other}: {detail}"),
        };
        println!("{} {what}", e["container"].as_str().unwrap_or("-"));
    }
    if reply["preempted"] != serde_json::Value::Bool(true) && reply["dumping"] != true {
        anyhow::bail!("nothing was preempted");
    }
    Ok(())
}

pub fn run(args: RunArgs) -> Result<()> {
    let mem_peak = match &args.mem_peak {
        None => None,
        Some(s) => Some(
            overbook_agent::config::parse_size_text(s)
                .map_err(|e| anyhow::anyhow!("--mem-peak: {e}"))?,
        ),
    };
    let request = overbook_agent::tasks::RunRequest {
        name: args.name,
        class: args.class,
        mem_peak,
        job: args.job,
        weight: args.weight,
        command: args.command,
        cwd: std::env::current_dir().ok(),
    };
    let body = serde_json::to_string(&request)?;
    let reply = api::post(&args.socket, "/v1/run", &body)?;
    let reply: overbook_agent::tasks::RunReply =
        serde_json::from_str(&reply).context("the agent's answer is not valid JSON")?;
    println!("{} {} (output: {})", reply.state, reply.container, reply.log);
    Ok(())
}

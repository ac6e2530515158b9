//! The deploy files, read by what reads them in use: the systemd unit by
//! `systemd-analyze verify` (which exits 0 on most problems, so its
//! standard error is what is checked), the ConfigMap's agent config and the
//! DaemonSet's command line by this build's `overbook agent --check-config`,
//! and the manifests for the names and RBAC rules issue 17's interface
//! fixes (no YAML parser is a dependency, so by their lines; a real API
//! server takes them in the Kubernetes tests). A missing `systemd-analyze`
//! FAILS the test: nothing is skipped.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Where the unit runs the agent from once installed; the check runs a
/// copy whose `ExecStart` is this build's binary (systemd-analyze refuses a
/// command that is not there).
const INSTALLED_BINARY: &str = "/usr/local/bin/overbook";
/// Where the unit and the DaemonSet read the agent's config.
const CONFIG_PATH: &str = "/etc/overbook/agent.toml";

fn deploy_file(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy").join(relative)
}

fn read_deploy(relative: &str) -> String {
    let path = deploy_file(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn unit_text() -> String {
    read_deploy("systemd/overbook-agent.service")
}

/// The unit with `ExecStart` pointed at this build's binary.
fn unit_for_verify(text: &str) -> String {
    let installed = format!("ExecStart={INSTALLED_BINARY} ");
    assert!(
        text.lines().any(|l| l.starts_with(&installed)),
        "the unit's ExecStart does not run {INSTALLED_BINARY}:\n{text}"
    );
    text.replace(
        &format!("ExecStart={INSTALLED_BINARY} "),
        &format!("ExecStart={} ", env!("CARGO_BIN_EXE_overbook")),
    )
}

/// What `systemd-analyze verify` finds wrong with `unit`: its lines about
/// the unit, and its exit status when that is not success. Lines about
/// other units (the host's own) are shown, not counted.
fn verify(unit: &str) -> Vec<String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("overbook-agent.service");
    std::fs::write(&path, unit).expect("write the unit");
    let out = match Command::new("systemd-analyze")
        .args(["verify", "--man=no", "--generators=no"])
        .arg(&path)
        .output()
    {
        Ok(out) => out,
        Err(e) => panic!(
            "\n!!!!! cannot run systemd-analyze ({e}): the systemd unit is NOT checked.\n\
             !!!!! Install it (Debian: apt-get install systemd); this test never skips.\n"
        ),
    };
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let (ours, theirs): (Vec<&str>, Vec<&str>) =
        stderr.lines().filter(|l| !l.trim().is_empty()).partition(|l| l.contains("overbook-agent"));
    if !theirs.is_empty() {
        eprintln!("systemd-analyze, about other units (not counted):\n{}", theirs.join("\n"));
    }
    let mut findings: Vec<String> = ours.into_iter().map(String::from).collect();
    if !out.status.success() {
        findings.push(format!("systemd-analyze verify exited {}: {stderr}", out.status));
    }
    findings
}

/// The value of `key=` in the unit (the last one given, as systemd takes it).
fn unit_value(text: &str, key: &str) -> Option<String> {
    let prefix = format!("{key}=");
    text.lines().rev().find_map(|l| l.strip_prefix(&prefix)).map(|v| v.trim().to_string())
}

fn overbook(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_overbook"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run overbook {args:?}: {e}"))
}

fn output_text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify_without_a_word() {
    let findings = verify(&unit_for_verify(&unit_text()));
    assert!(findings.is_empty(), "systemd-analyze verify on the unit:\n{}", findings.join("\n"));
}

#[test]
fn systemd_analyze_verify_catches_a_misspelt_key_a_bad_value_and_a_missing_binary() {
    let good = unit_for_verify(&unit_text());
    let binary = env!("CARGO_BIN_EXE_overbook");
    let cases = [
        ("a misspelt key", "\nRestart=on-failure\n", "\nRestrt=on-failure\n", "Restrt"),
        ("a bad value", "\nKillMode=process\n", "\nKillMode=proces\n", "proces"),
        ("a binary that is not there", binary, "/nonexistent/overbook", "/nonexistent/overbook"),
    ];
    for (what, from, to, named) in cases {
        assert!(good.contains(from), "{what}: the unit has no {from:?} to spoil");
        let findings = verify(&good.replacen(from, to, 1));
        assert!(
            findings.iter().any(|f| f.contains(named)),
            "{what} ({to:?}) went unnoticed: {findings:?}"
        );
    }
}

/// The agent's built-in `checkpoint.timeout`, seconds, as it prints it.
fn default_checkpoint_timeout() -> f64 {
    let o = overbook(&["agent", "--check-config"]);
    let text = output_text(&o);
    assert!(o.status.success(), "{text}");
    let section = text.split("\n[checkpoint]\n").nth(1).unwrap_or_else(|| panic!("{text}"));
    let line = section
        .lines()
        .take_while(|l| !l.starts_with('['))
        .find_map(|l| l.strip_prefix("timeout = "))
        .unwrap_or_else(|| panic!("no checkpoint.timeout in:\n{text}"));
    line.trim().parse().unwrap_or_else(|e| panic!("{line}: {e}"))
}

/// Seconds of a systemd time span written as `330s` or `330`.
fn seconds(span: &str) -> f64 {
    span.trim_end_matches('s').parse().unwrap_or_else(|e| panic!("{span}: {e}"))
}

#[test]
fn the_unit_protects_the_agent_and_waits_for_a_dump_when_stopping() {
    let unit = unit_text();
    let want = [
        ("Type", "simple"),
        ("ExecStart", &format!("{INSTALLED_BINARY} agent --config {CONFIG_PATH}")),
        ("Restart", "on-failure"),
        ("OOMScoreAdjust", "-1000"),
        ("LimitMEMLOCK", "infinity"),
        ("OOMPolicy", "continue"),
        // Not mixed: on cgroup v1 the running `overbook run` tasks stay in
        // the unit's cgroup, and mixed would SIGKILL them at every stop.
        ("KillMode", "process"),
        ("NoNewPrivileges", "no"),
    ];
    for (key, value) in want {
        let got = unit_value(&unit, key);
        // NoNewPrivileges is off by being left out (or said so).
        if key == "NoNewPrivileges" && got.is_none() {
            continue;
        }
        assert_eq!(got.as_deref(), Some(value), "{key}=");
    }
    // The agent must not lose /sys/fs/cgroup, where all its writes go.
    for key in ["ProtectKernelTunables", "ProtectControlGroups"] {
        assert!(unit_value(&unit, key).is_none_or(|v| v == "no"), "{key} would stop the agent");
    }
    let timeout = default_checkpoint_timeout();
    let stop = seconds(&unit_value(&unit, "TimeoutStopSec").expect("TimeoutStopSec="));
    assert!(stop > timeout, "TimeoutStopSec={stop} does not let a {timeout} s dump finish");
    let grace =
        yaml_scalar(&read_deploy("kubernetes/30-daemonset.yaml"), "terminationGracePeriodSeconds");
    let grace: f64 = grace.parse().expect("a number");
    assert!(grace > timeout, "terminationGracePeriodSeconds {grace} < a {timeout} s dump");
}

/// The first `key: value` of a manifest (value unquoted).
fn yaml_scalar(text: &str, key: &str) -> String {
    let prefix = format!("{key}:");
    text.lines()
        .find_map(|l| l.trim_start().trim_start_matches("- ").strip_prefix(&prefix))
        .map(|v| v.trim().trim_matches('"').to_string())
        .unwrap_or_else(|| panic!("no {key}: in\n{text}"))
}

/// A flow sequence, `["a", "b"]`, as its items.
fn flow_list(value: &str) -> Vec<String> {
    let inner = value.trim().strip_prefix('[').and_then(|v| v.strip_suffix(']'));
    let inner = inner.unwrap_or_else(|| panic!("{value:?} is not a [list]"));
    inner.split(',').map(|s| s.trim().trim_matches('"').to_string()).collect()
}

/// The text of the block scalar `key: |` (its lines, unindented).
fn block_scalar(text: &str, key: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let start = lines
        .iter()
        .position(|l| l.trim() == format!("{key}: |"))
        .unwrap_or_else(|| panic!("no {key}: | in\n{text}"));
    let key_indent = indent(lines[start]);
    let body: Vec<&str> = lines[start + 1..]
        .iter()
        .copied()
        .take_while(|l| l.trim().is_empty() || indent(l) > key_indent)
        .collect();
    let by = body.iter().find(|l| !l.trim().is_empty()).map_or(0, |l| indent(l));
    body.iter().map(|l| l.get(by..).unwrap_or("")).collect::<Vec<_>>().join("\n") + "\n"
}

/// The block sequence under `key:` (`- item` lines), as its items.
fn block_list(text: &str, key: &str) -> Vec<String> {
    let mut lines = text.lines().skip_while(|l| l.trim() != format!("{key}:"));
    assert!(lines.next().is_some(), "no {key}: in\n{text}");
    lines.map_while(|l| l.trim().strip_prefix("- ")).map(|s| s.trim().to_string()).collect()
}

fn configmap_agent_toml() -> String {
    block_scalar(&read_deploy("kubernetes/20-configmap.yaml"), "agent.toml")
}

fn check_config(text: &str, extra: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("agent.toml");
    std::fs::write(&path, text).expect("write");
    let path = path.to_str().expect("utf-8");
    let mut args = vec!["agent", "--config", path];
    args.extend_from_slice(extra);
    args.push("--check-config");
    let o = overbook(&args);
    let out = output_text(&o);
    assert!(o.status.success(), "overbook {args:?} refused the config:\n{out}\n---\n{text}");
    out
}

#[test]
fn the_configmaps_agent_config_is_one_the_agent_takes_for_either_cgroup_driver() {
    let text = configmap_agent_toml();
    let out = check_config(&text, &[]);
    let shown = [
        "root = \"kubepods\"",
        "pods = \"cgroupfs\"",
        "state_db = \"/var/lib/overbook/",
        "offer = true",
        "evict = true",
    ];
    for shown in shown {
        assert!(out.contains(shown), "{shown} not in:\n{out}");
    }
    // The systemd driver, as its comment says to write it.
    let systemd = text
        .replacen("\nroot = \"kubepods\"\n", "\nroot = \"kubepods.slice\"\n", 1)
        .replacen("\npods = \"cgroupfs\"\n", "\npods = \"systemd\"\n", 1);
    assert!(
        text.contains("#   root = \"kubepods.slice\"") && text.contains("#   pods = \"systemd\"")
    );
    let out = check_config(&systemd, &[]);
    assert!(out.contains("pods = \"systemd\""), "{out}");
    // The state database must be on the host, under the DaemonSet's hostPath.
    let daemonset = read_deploy("kubernetes/30-daemonset.yaml");
    assert!(daemonset.contains("path: /var/lib/overbook\n"), "no hostPath for the state");
}

#[test]
fn the_daemonsets_command_line_is_one_the_agent_takes() {
    let daemonset = read_deploy("kubernetes/30-daemonset.yaml");
    assert_eq!(flow_list(&yaml_scalar(&daemonset, "command")), ["overbook"]);
    assert!(read_deploy("kubernetes/Containerfile").contains(INSTALLED_BINARY));
    let args = block_list(&daemonset, "args");
    assert_eq!(args.first().map(String::as_str), Some("agent"), "{args:?}");
    assert!(args.iter().any(|a| a == "--node-name=$(NODE_NAME)"), "{args:?}");
    assert!(daemonset.contains("fieldPath: spec.nodeName"), "NODE_NAME from the downward API");
    let at = args.iter().position(|a| a == "--config").expect("--config");
    assert_eq!(args.get(at + 1).map(String::as_str), Some(CONFIG_PATH));
    assert!(daemonset.contains("mountPath: /etc/overbook\n"), "the ConfigMap at /etc/overbook");
    // The same words, with the ConfigMap's config where the volume puts it
    // and the node's name where the kubelet puts it.
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("agent.toml");
    std::fs::write(&config, configmap_agent_toml()).expect("write");
    let config = config.to_str().expect("utf-8");
    let mut run: Vec<String> = args
        .iter()
        .map(|a| a.replace("$(NODE_NAME)", "node-a").replace(CONFIG_PATH, config))
        .collect();
    run.push("--check-config".into());
    let run: Vec<&str> = run.iter().map(String::as_str).collect();
    let o = overbook(&run);
    let out = output_text(&o);
    assert!(o.status.success(), "overbook {run:?}:\n{out}");
    assert!(out.contains("node_name = \"node-a\""), "--node-name not in effect:\n{out}");
}

#[test]
fn the_manifests_are_the_objects_and_the_least_rbac_the_interface_names() {
    let mut objects = Vec::new();
    for name in ["00-namespace", "10-rbac", "20-configmap", "30-daemonset"] {
        let text = read_deploy(&format!("kubernetes/{name}.yaml"));
        assert!(!text.contains('\t'), "{name}.yaml: a tab (YAML indents with spaces)");
        for doc in text.split("\n---\n") {
            let top = |key: &str| {
                doc.lines().find_map(|l| l.strip_prefix(&format!("{key}:"))).map(str::trim)
            };
            let api = top("apiVersion").unwrap_or_else(|| panic!("{name}: no apiVersion"));
            let kind = top("kind").unwrap_or_else(|| panic!("{name}: no kind"));
            let meta = doc.split("\nmetadata:\n").nth(1).unwrap_or_else(|| panic!("{name}"));
            let field = |key: &str| {
                meta.lines()
                    .take_while(|l| l.starts_with(' '))
                    .find_map(|l| l.strip_prefix(&format!("  {key}:")))
                    .map(|v| v.trim().to_string())
            };
            let object = field("name").unwrap_or_else(|| panic!("{name}: {kind} has no name"));
            objects.push((api.to_string(), kind.to_string(), object, field("namespace")));
        }
    }
    let ns = Some("overbook".to_string());
    let want = [
        ("v1", "Namespace", "overbook", None),
        ("v1", "ServiceAccount", "overbook-agent", ns.clone()),
        ("rbac.authorization.k8s.io/v1", "ClusterRole", "overbook-agent", None),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "overbook-agent", None),
        ("v1", "ConfigMap", "overbook-agent", ns.clone()),
        ("apps/v1", "DaemonSet", "overbook-agent", ns),
    ];
    let want: Vec<_> = want
        .iter()
        .map(|(a, k, n, s)| (a.to_string(), k.to_string(), n.to_string(), s.clone()))
        .collect();
    assert_eq!(objects, want);

    // The ClusterRole's grants, each (resource, verb): exactly these.
    let rbac = read_deploy("kubernetes/10-rbac.yaml");
    let mut grants = Vec::new();
    let mut resources = Vec::new();
    for line in rbac.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
        if let Some(v) = line.strip_prefix("- apiGroups:") {
            assert_eq!(flow_list(v), [""], "only the core group: {line}");
        } else if let Some(v) = line.strip_prefix("resources:") {
            resources = flow_list(v);
        } else if let Some(v) = line.strip_prefix("verbs:") {
            for r in &resources {
                grants.extend(flow_list(v).into_iter().map(|verb| format!("{r} {verb}")));
            }
        }
    }
    grants.sort();
    let mut least = [
        "pods get",
        "pods list",
        "pods watch",
        "pods/eviction create",
        "pods/status patch",
        "nodes/status patch",
        "events create",
    ];
    least.sort_unstable();
    assert_eq!(grants, least);
    let binding = rbac.split("kind: ClusterRoleBinding").nth(1).expect("a binding");
    for bound in ["kind: ClusterRole\n", "name: overbook-agent\n", "kind: ServiceAccount\n"] {
        assert!(binding.contains(bound), "the binding lacks {bound:?}");
    }

    let daemonset = read_deploy("kubernetes/30-daemonset.yaml");
    for (key, value) in [
        ("serviceAccountName", "overbook-agent"),
        ("priorityClassName", "system-node-critical"),
        ("hostPID", "true"),
        ("privileged", "true"),
        ("operator", "Exists"),
    ] {
        assert_eq!(yaml_scalar(&daemonset, key), value, "{key}");
    }
    assert!(
        daemonset.contains("path: /sys/fs/cgroup\n")
            && daemonset.contains("mountPath: /sys/fs/cgroup\n")
    );
    let configmap = daemonset.split("configMap:").nth(1).expect("the config volume");
    assert_eq!(yaml_scalar(configmap, "name"), "overbook-agent");
}

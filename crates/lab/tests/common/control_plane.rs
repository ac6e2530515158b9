//! The real control plane of `scripts/kube` (kube-apiserver,
//! kube-scheduler, Debian's etcd on loopback), brought up for a test and
//! down when it ends. Self-contained (std only): the lab's Kubernetes tests
//! and the CLI's `bench_kubernetes` both include this one file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kube")
}

/// A control plane up in `dir`, brought down on drop (also on a failed
/// assertion).
pub struct ControlPlane {
    pub dir: PathBuf,
    pub kubectl: String,
    pub kubeconfig: String,
}

impl ControlPlane {
    pub fn up(dir: PathBuf) -> ControlPlane {
        let out = Command::new(script()).arg("up").arg(&dir).output().expect("runs scripts/kube");
        // Made first, so that its drop brings down whatever `up` started.
        let mut plane =
            ControlPlane { dir: dir.clone(), kubectl: String::new(), kubeconfig: String::new() };
        assert!(out.status.success(), "scripts/kube up: {}", text(&out));
        plane.kubectl = plane.env("KUBECTL");
        plane.kubeconfig = plane.env("KUBECONFIG");
        plane
    }

    /// A value of the plane's env file (KUBE_API, KUBE_TOKEN, ...).
    pub fn env(&self, key: &str) -> String {
        let env = std::fs::read_to_string(self.dir.join("env")).expect("its env file");
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{key} in {env}"))
            .to_string()
    }

    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Output {
        self.kubectl_as(&self.kubeconfig, args, stdin)
    }

    /// kubectl with the credentials of `kubeconfig`.
    pub fn kubectl_as(&self, kubeconfig: &str, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("--kubeconfig").arg(kubeconfig).arg("--request-timeout=20s").args(args);
        match stdin {
            None => cmd.output().expect("runs kubectl"),
            Some(input) => {
                use std::io::Write;
                let mut child = cmd
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("runs kubectl");
                child.stdin.take().expect("piped").write_all(input.as_bytes()).expect("writes");
                child.wait_with_output().expect("waits")
            }
        }
    }

    pub fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.kubectl(args, stdin);
        assert!(out.status.success(), "kubectl {args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A field of an object, by jsonpath (empty if it has none).
    pub fn field(&self, kind_name: &[&str], jsonpath: &str) -> String {
        let mut args = vec!["get"];
        args.extend_from_slice(kind_name);
        let path = format!("jsonpath={jsonpath}");
        args.extend_from_slice(&["-o", &path]);
        self.ok(&args, None)
    }

    pub fn pids(&self) -> Vec<u32> {
        ["etcd", "kube-apiserver", "kube-scheduler"]
            .iter()
            .filter_map(|p| std::fs::read_to_string(self.dir.join(format!("{p}.pid"))).ok())
            .filter_map(|t| t.trim().parse().ok())
            .collect()
    }

    /// Stops the API server (etcd and the scheduler run on): an outage.
    pub fn apiserver_stop(&self) {
        self.script("apiserver-stop");
    }

    /// Starts the API server again on its port; returns once it is ready.
    pub fn apiserver_start(&self) {
        self.script("apiserver-start");
    }

    /// `scripts/kube VERB DIR` on this plane, which must succeed.
    fn script(&self, verb: &str) {
        let out =
            Command::new(script()).arg(verb).arg(&self.dir).output().expect("runs scripts/kube");
        assert!(out.status.success(), "scripts/kube {verb}: {}", text(&out));
    }

    /// Registers Node `name` as a kubelet would: its capacity, then the
    /// not-ready taint the API server adds to a new node lifted (there is
    /// no node controller to lift it).
    pub fn register_node(&self, name: &str) {
        let node = format!(r#"{{"apiVersion":"v1","kind":"Node","metadata":{{"name":"{name}"}}}}"#);
        self.ok(&["create", "-f", "-"], Some(&node));
        let status = r#"{"status":{"capacity":{"cpu":"2","memory":"4Gi","pods":"110"},"allocatable":{"cpu":"2","memory":"4Gi","pods":"110"},"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"played by the test"}]}}"#;
        self.ok(&["patch", "node", name, "--subresource", "status", "-p", status], None);
        let taints = self.field(&["node", name], "{.spec.taints[*].key}");
        for key in taints.split_whitespace() {
            self.ok(&["taint", "node", name, &format!("{key}-")], None);
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("down").arg(&self.dir).output();
    }
}

pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

//! Every example command of the README, docs/ and `--help`, checked against
//! the program as it is, so the docs cannot drift from it:
//!
//! * `overbook …` commands are parsed by the real command line
//!   (`overbook::Cli`); the quick ones (`--help`, `sim --list`, `sim
//!   --small`) also run through the binary, in a scratch directory, each
//!   with a deadline (a hang is a failure, not a stuck CI job); the other
//!   `sim` examples load their scenario and settings (`--dry-run`);
//! * `cargo …` commands must name packages and `--test`/`--bench` targets
//!   that exist;
//! * `scripts/…` commands must name a script and a subcommand it has.
//!
//! Nothing that could run long, need root or a control plane is run: the
//! agent, the demo and the benches are parsed only.

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The most any one child process may take.
const DEADLINE: Duration = Duration::from_secs(120);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

// ---------------------------------------------------------------------------
// Running the binary, with a deadline

/// What a finished child printed.
struct Ran {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Run `overbook ARGS` in `cwd`; a child still running after `DEADLINE`
/// is killed and reported.
fn run_overbook(args: &[String], cwd: &Path, deadline: Duration) -> Result<Ran, String> {
    let shown = format!("overbook {}", args.join(" "));
    let mut child = Command::new(env!("CARGO_BIN_EXE_overbook"))
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("RUST_BACKTRACE")
        .spawn()
        .map_err(|e| format!("{shown}: cannot start: {e}"))?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_string(&mut text);
            }
            text
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{shown}: still running after {deadline:?}, killed"));
            }
            Err(e) => return Err(format!("{shown}: {e}")),
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    Ok(Ran { ok: status.success(), stdout, stderr })
}

/// Run `overbook ARGS` in `cwd` and require it to exit 0.
fn run_ok(args: &[String], cwd: &Path) -> Result<String, String> {
    let ran = run_overbook(args, cwd, DEADLINE)?;
    if ran.ok {
        Ok(ran.stdout)
    } else {
        Err(format!(
            "overbook {} failed:\n{}{}",
            args.join(" "),
            tail(&ran.stdout, 10),
            tail(&ran.stderr, 10)
        ))
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    let mut out = all[all.len().saturating_sub(lines)..].join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_string()).collect()
}

// ---------------------------------------------------------------------------
// Reading commands out of markdown

/// A command found in a document, and where.
#[derive(Debug, Clone)]
struct Example {
    place: String,
    line: String,
}

/// The commands of a markdown file's fenced shell blocks (`sh`, `bash`,
/// `shell`, `console`), one per logical line (`\` continuations joined);
/// from unlabeled blocks (which mostly show output) only the lines that
/// start like a command this test knows.
fn fenced_commands(markdown: &str, file: &str) -> Vec<Example> {
    let mut found = Vec::new();
    let mut block: Option<(String, usize)> = None;
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in markdown.lines().enumerate() {
        let n = i + 1;
        let trimmed = raw.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            block = match block {
                None => Some((info.trim().to_string(), n)),
                Some(_) => None,
            };
            pending = None;
            continue;
        }
        let Some((lang, _)) = &block else { continue };
        let shell = matches!(lang.as_str(), "sh" | "bash" | "shell" | "console");
        if !shell && !lang.is_empty() {
            continue;
        }
        let (start, text) = match pending.take() {
            Some((start, before)) => (start, format!("{before} {}", raw.trim())),
            None => {
                let line = raw.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                if !shell && !looks_like_a_command(line) {
                    continue;
                }
                (n, line.to_string())
            }
        };
        if let Some(cut) = text.strip_suffix('\\') {
            pending = Some((start, cut.trim_end().to_string()));
        } else {
            found.push(Example { place: format!("{file}:{start}"), line: text });
        }
    }
    found
}

fn looks_like_a_command(line: &str) -> bool {
    let words = shell_words(line);
    let words = strip_prefixes(&words);
    let Some(first) = words.first() else { return false };
    if first == "overbook" {
        // Not a table row that starts with a policy's name.
        return match words.get(1) {
            None => true,
            Some(w) => w.starts_with('-') || overbook::Cli::command().find_subcommand(w).is_some(),
        };
    }
    first == "cargo" || first.starts_with("scripts/")
}

/// Backticked `overbook …` spans of a markdown file's prose (outside
/// fenced blocks).
fn inline_commands(markdown: &str, file: &str) -> Vec<Example> {
    let mut found = Vec::new();
    let mut fenced = false;
    for (i, raw) in markdown.lines().enumerate() {
        if raw.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        for span in backticked(raw) {
            if span.starts_with("overbook ") {
                found.push(Example { place: format!("{file}:{}", i + 1), line: span });
            }
        }
    }
    found
}

/// The backticked spans of a text, whitespace inside each made single spaces.
fn backticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// Words of a shell line: quotes removed, a `#` comment dropped. Enough for
/// documentation (no expansions).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '\\') => {
                if let Some(next) = chars.next() {
                    word.push(next);
                    in_word = true;
                }
            }
            (None, '#') if !in_word => break,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The simple commands of a line: split at `&&`, `||`, `;` and `|` (what
/// follows a pipe is the reader of the output: `head`, `grep`; not ours).
fn simple_commands(words: &[String]) -> Vec<Vec<String>> {
    let mut commands = vec![Vec::new()];
    let mut after_pipe = false;
    for w in words {
        match w.as_str() {
            "&&" | "||" | ";" => {
                commands.push(Vec::new());
                after_pipe = false;
            }
            "|" => after_pipe = true,
            _ if after_pipe => {}
            _ => commands.last_mut().expect("one").push(w.clone()),
        }
    }
    commands.retain(|c| !c.is_empty());
    commands
}

/// Drop what runs a command rather than being it: `sudo`, environment
/// assignments, `target/release/` and `cargo run … --`.
fn strip_prefixes(words: &[String]) -> Vec<String> {
    let mut rest: &[String] = words;
    loop {
        match rest.first().map(String::as_str) {
            Some("sudo") => rest = &rest[1..],
            Some(w) if is_assignment(w) => rest = &rest[1..],
            _ => break,
        }
    }
    let mut out: Vec<String> = rest.to_vec();
    if out.first().is_some_and(|w| w.ends_with("/overbook")) {
        out[0] = "overbook".into();
    }
    if out.len() >= 2 && out[0] == "cargo" && out[1] == "run" {
        if let Some(dash) = out.iter().position(|w| w == "--") {
            let mut cmd = vec!["overbook".to_string()];
            cmd.extend(out[dash + 1..].iter().cloned());
            return cmd;
        }
        return vec!["overbook".to_string()];
    }
    out
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    })
}

// ---------------------------------------------------------------------------
// The checkers

/// What the checks know of the repository.
struct Repo {
    root: PathBuf,
    /// Built-in scenario names (`overbook sim --list --names`).
    scenarios: Vec<String>,
}

impl Repo {
    fn new() -> Repo {
        let root = root();
        let scenarios = overbook_sim_names();
        Repo { root, scenarios }
    }
}

fn overbook_sim_names() -> Vec<String> {
    overbook_sim::scenario::BUILT_IN.iter().map(|(name, _)| (*name).to_string()).collect()
}

/// Check one line of a document: every simple command in it.
fn check_line(repo: &Repo, line: &str) -> Result<(), String> {
    let words = shell_words(line);
    for command in simple_commands(&words) {
        check_command(repo, &strip_prefixes(&command))?;
    }
    Ok(())
}

/// Check one simple command, prefixes stripped: ours parsed or checked
/// against the repository, another program's repository paths.
fn check_command(repo: &Repo, words: &[String]) -> Result<(), String> {
    let Some(program) = words.first() else { return Ok(()) };
    if program == "overbook" {
        check_overbook(repo, words)
    } else if program == "cargo" {
        check_cargo(repo, words)
    } else if program.starts_with("scripts/") {
        check_script(repo, words)
    } else {
        // Another program (kubectl, podman, systemctl): the files of this
        // repository it is given must exist.
        match missing_paths(&repo.root, &words.join(" ")).first() {
            Some(path) => Err(format!("`{}`: no {path} in the repository", words.join(" "))),
            None => Ok(()),
        }
    }
}

/// Parse an `overbook …` command with the real command line.
fn check_overbook(repo: &Repo, words: &[String]) -> Result<(), String> {
    let shown = words.join(" ");
    match overbook::Cli::try_parse_from(words) {
        Ok(_) => {}
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {}
        Err(e) => return Err(format!("`{shown}`: {}", first_line(&e.to_string()))),
    }
    check_scenario(repo, words)
}

/// `overbook sim --scenario X`: X is a built-in scenario or a file.
fn check_scenario(repo: &Repo, words: &[String]) -> Result<(), String> {
    if words.get(1).map(String::as_str) != Some("sim") {
        return Ok(());
    }
    let mut it = words.iter();
    while let Some(w) = it.next() {
        let value = match w.as_str() {
            "--scenario" | "-s" => it.next().cloned(),
            _ => w.strip_prefix("--scenario=").map(String::from),
        };
        if let Some(v) = value {
            if !repo.scenarios.contains(&v) && !repo.root.join(&v).is_file() {
                return Err(format!(
                    "`{}`: no scenario {v:?} (built in: {})",
                    words.join(" "),
                    repo.scenarios.join(", ")
                ));
            }
        }
    }
    Ok(())
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").trim().to_string()
}

/// A workspace package: its name, directory and targets.
struct Package {
    name: String,
    dir: PathBuf,
    tests: BTreeSet<String>,
    benches: BTreeSet<String>,
}

fn packages(root: &Path) -> Vec<Package> {
    let text = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let ws: toml::Table = text.parse().expect("Cargo.toml is TOML");
    let members = ws
        .get("workspace")
        .and_then(|w| w.get("members"))
        .and_then(|m| m.as_array())
        .cloned()
        .unwrap_or_default();
    members
        .iter()
        .filter_map(|m| m.as_str())
        .map(|m| {
            let dir = root.join(m);
            let manifest: toml::Table = std::fs::read_to_string(dir.join("Cargo.toml"))
                .expect("a member's Cargo.toml")
                .parse()
                .expect("a member's Cargo.toml is TOML");
            let name = manifest
                .get("package")
                .and_then(|p| p.get("name"))
                .and_then(|n| n.as_str())
                .expect("package.name")
                .to_string();
            let targets = |kind: &str, folder: &str| {
                let mut set = BTreeSet::new();
                if let Ok(entries) = std::fs::read_dir(dir.join(folder)) {
                    for e in entries.filter_map(|e| e.ok()) {
                        let p = e.path();
                        if p.extension().is_some_and(|x| x == "rs") {
                            set.extend(p.file_stem().and_then(|s| s.to_str()).map(String::from));
                        } else if p.join("main.rs").is_file() {
                            set.extend(p.file_name().and_then(|s| s.to_str()).map(String::from));
                        }
                    }
                }
                for t in manifest.get(kind).and_then(|t| t.as_array()).into_iter().flatten() {
                    set.extend(t.get("name").and_then(|n| n.as_str()).map(String::from));
                }
                set
            };
            let tests = targets("test", "tests");
            let benches = targets("bench", "benches");
            Package { name, dir, tests, benches }
        })
        .collect()
}

/// A `cargo …` command: a known subcommand, packages that exist, test and
/// bench targets of those packages, a `--path` with a manifest.
fn check_cargo(repo: &Repo, words: &[String]) -> Result<(), String> {
    let shown = words.join(" ");
    let all = packages(&repo.root);
    let sub = words.get(1).map(String::as_str).unwrap_or("");
    let known = ["build", "test", "bench", "install", "run", "check", "clippy", "fmt", "doc"];
    if !known.contains(&sub) {
        return Err(format!("`{shown}`: {sub:?} is not a cargo command this project uses"));
    }
    let mut chosen: Vec<&Package> = Vec::new();
    let mut tests = Vec::new();
    let mut benches = Vec::new();
    let mut it = words[2..].iter().take_while(|w| *w != "--");
    while let Some(w) = it.next() {
        let (flag, inline) = match w.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (w.as_str(), None),
        };
        let mut value = || inline.clone().or_else(|| it.next().cloned());
        match flag {
            "-p" | "--package" => {
                let name = value().ok_or_else(|| format!("`{shown}`: {flag} needs a package"))?;
                let p = all.iter().find(|p| p.name == name).ok_or_else(|| {
                    let names: Vec<&str> = all.iter().map(|p| p.name.as_str()).collect();
                    format!("`{shown}`: no package {name:?} (packages: {})", names.join(", "))
                })?;
                chosen.push(p);
            }
            "--test" => tests.push(value().ok_or(format!("`{shown}`: --test needs a target"))?),
            "--bench" => benches.push(value().ok_or(format!("`{shown}`: --bench needs a target"))?),
            "--path" => {
                let path = value().ok_or(format!("`{shown}`: --path needs a directory"))?;
                if !repo.root.join(&path).join("Cargo.toml").is_file() {
                    return Err(format!("`{shown}`: {path} has no Cargo.toml"));
                }
            }
            "--features" | "-F" | "--target-dir" | "-j" | "--jobs" | "--profile" | "--bin" => {
                value();
            }
            _ => {}
        }
    }
    let scope: Vec<&Package> = if chosen.is_empty() { all.iter().collect() } else { chosen };
    for (kind, names) in [("test", &tests), ("bench", &benches)] {
        for name in names {
            let has = |p: &&Package| {
                if kind == "test" {
                    p.tests.contains(name)
                } else {
                    p.benches.contains(name)
                }
            };
            if !scope.iter().any(has) {
                let of: Vec<String> = scope.iter().map(|p| p.name.clone()).collect();
                return Err(format!(
                    "`{shown}`: no {kind} target {name:?} in {} (see {})",
                    of.join(", "),
                    scope
                        .iter()
                        .map(|p| p.dir.strip_prefix(&repo.root).unwrap_or(&p.dir).display())
                        .map(|d| format!("{d}/{kind}{}", if kind == "test" { "s" } else { "es" }))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// The subcommands a script dispatches on: the patterns of its top-level
/// `case` (the one at column 0), `*` left out. None: it takes none.
fn script_subcommands(text: &str) -> Option<Vec<String>> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with("case "));
    lines.next()?;
    let mut subs = Vec::new();
    for line in lines {
        if line.starts_with("esac") {
            break;
        }
        let t = line.trim_start();
        let Some((pattern, _)) = t.split_once(')') else { continue };
        if pattern.is_empty() || pattern.contains(char::is_whitespace) && !pattern.contains('|') {
            continue;
        }
        for p in pattern.split('|').map(str::trim) {
            if !p.is_empty() && p != "*" && !p.contains(['"', '$', '(']) {
                subs.push(p.to_string());
            }
        }
    }
    Some(subs)
}

/// `scripts/vm`'s VM_TESTS: (package, test target).
fn vm_tests(text: &str) -> Vec<(String, String)> {
    text.lines()
        .skip_while(|l| !l.starts_with("VM_TESTS=("))
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with(')'))
        .filter_map(|l| {
            let mut w = l.trim().trim_matches('"').split_whitespace();
            Some((w.next()?.to_string(), w.next()?.to_string()))
        })
        .collect()
}

/// A `scripts/…` command: the script exists and is executable, its first
/// argument is a subcommand it has; `scripts/vm test --only T` names one of
/// VM_TESTS (itself a test target that exists); the command `scripts/vm
/// run` runs is checked in turn.
fn check_script(repo: &Repo, words: &[String]) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let shown = words.join(" ");
    let path = repo.root.join(&words[0]);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("`{shown}`: no script {}: {e}", words[0]))?;
    let mode = std::fs::metadata(&path).map(|m| m.permissions().mode()).unwrap_or(0);
    if mode & 0o111 == 0 {
        return Err(format!("`{shown}`: {} is not executable", words[0]));
    }
    let subs = script_subcommands(&text);
    let Some(sub) = words.get(1) else { return Ok(()) };
    match &subs {
        None => return Err(format!("`{shown}`: {} takes no subcommand", words[0])),
        Some(subs) if !subs.iter().any(|s| s == sub) => {
            let public: Vec<&str> =
                subs.iter().map(String::as_str).filter(|s| !s.starts_with('_')).collect();
            return Err(format!(
                "`{shown}`: {} has no subcommand {sub:?} (it has: {})",
                words[0],
                public.join(", ")
            ));
        }
        Some(_) => {}
    }
    if words[0] == "scripts/vm" && sub == "test" {
        let known = vm_tests(&text);
        let mut it = words[2..].iter().take_while(|w| *w != "--");
        while let Some(w) = it.next() {
            if w == "--only" {
                let target = it.next().ok_or(format!("`{shown}`: --only needs a test target"))?;
                let Some((package, _)) = known.iter().find(|(_, t)| t == target) else {
                    let names: Vec<&str> = known.iter().map(|(_, t)| t.as_str()).collect();
                    return Err(format!(
                        "`{shown}`: {target:?} is not one of VM_TESTS ({})",
                        names.join(" ")
                    ));
                };
                check_cargo(repo, &strings(&["cargo", "test", "-p", package, "--test", target]))
                    .map_err(|e| format!("`{shown}`: VM_TESTS: {e}"))?;
            }
        }
    }
    if words[0] == "scripts/vm" && sub == "run" {
        let inner: Vec<String> = words[2..].iter().skip_while(|w| *w == "--").cloned().collect();
        let inner = strip_prefixes(&inner);
        if looks_like_a_command(&inner.join(" ")) {
            check_command(repo, &inner)?;
        }
    }
    Ok(())
}

/// An inline `overbook …` span of prose: a synopsis (`[--flag X]`,
/// placeholders) names a command that exists and flags it has; anything
/// else parses, save that a mention may leave out required arguments
/// (`overbook adopt`, `overbook sim --set`). The words of a whole command,
/// to run, when it is one.
fn check_inline(repo: &Repo, span: &str) -> Result<Option<Vec<String>>, String> {
    let span = span.split(" | ").next().unwrap_or(span);
    let words: Vec<String> = span.split_whitespace().map(String::from).collect();
    let (path, sub) = subcommand_of(&words);
    let synopsis = span.contains(['[', '|']) || span.contains("...");
    let bare = |w: &str| w.trim_matches(|c: char| "[](),|\\".contains(c)).to_string();
    let flags: Vec<String> = words.iter().map(|w| bare(w)).filter(|w| is_flag(w)).collect();
    for f in &flags {
        let name = f.trim_start_matches('-').split('=').next().unwrap_or("");
        if !has_long_flag(&sub, name) {
            return Err(format!("`{span}`: {} has no flag --{name}", path.join(" ")));
        }
    }
    if synopsis {
        return Ok(None);
    }
    let mut words = words;
    // A flag mentioned last, without its value: drop it (checked above).
    if let Some(last) = words.last() {
        let name = last.trim_start_matches('-').to_string();
        if is_flag(last) && !last.contains('=') && takes_value(&sub, &name) {
            words.pop();
            return check_scenario(repo, &words).map(|()| None);
        }
    }
    match overbook::Cli::try_parse_from(&words) {
        Ok(_) => check_scenario(repo, &words).map(|()| Some(words)),
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::MissingRequiredArgument
                    | ErrorKind::MissingSubcommand
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            check_scenario(repo, &words).map(|()| None)
        }
        Err(e) => Err(format!("`{span}`: {}", first_line(&e.to_string()))),
    }
}

fn is_flag(word: &str) -> bool {
    word.strip_prefix("--").is_some_and(|r| r.starts_with(|c: char| c.is_ascii_lowercase()))
}

/// The subcommand a command's leading words name: its path and clap command.
fn subcommand_of(words: &[String]) -> (Vec<String>, clap::Command) {
    let mut cmd = overbook::Cli::command();
    let mut path = vec!["overbook".to_string()];
    for w in words.iter().skip(1) {
        match cmd.find_subcommand(w) {
            Some(sub) => {
                let sub = sub.clone();
                path.push(w.clone());
                cmd = sub;
            }
            None => break,
        }
    }
    (path, cmd)
}

fn has_long_flag(cmd: &clap::Command, name: &str) -> bool {
    name == "help" || name == "version" || cmd.get_arguments().any(|a| a.get_long() == Some(name))
}

fn takes_value(cmd: &clap::Command, name: &str) -> bool {
    cmd.get_arguments()
        .find(|a| a.get_long() == Some(name))
        .is_some_and(|a| a.get_action().takes_values())
}

// ---------------------------------------------------------------------------
// What runs

/// Whether an `overbook …` example is quick and harmless to run as
/// written: help, `sim --list`, `sim --small`.
fn quick(words: &[String]) -> bool {
    let has = |w: &str| words.iter().any(|x| x == w);
    if has("--help") || has("-h") {
        return true;
    }
    words.get(1).map(String::as_str) == Some("sim") && (has("--list") || has("--small"))
}

/// Whether an example has placeholders (`FILE`, `N`, `...`) instead of values.
fn has_placeholders(words: &[String]) -> bool {
    words.iter().any(|w| {
        w.contains("...")
            || w.split(|c: char| !c.is_ascii_alphanumeric())
                .any(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_uppercase()))
    })
}

/// An `overbook sim …` example too long to run: load its scenario with its
/// settings (`--dry-run`), which checks every name, key and value.
fn dry_run_sim(words: &[String]) -> Option<Result<(), String>> {
    if words.get(1).map(String::as_str) != Some("sim")
        || quick(words)
        || has_placeholders(words)
        || words.iter().any(|w| w == "--list")
    {
        return None;
    }
    let mut dry = words.to_vec();
    if !dry.iter().any(|w| w == "--dry-run") {
        dry.push("--dry-run".into());
    }
    Some(run_example(&dry))
}

/// Run an `overbook …` example in a fresh scratch directory: it must exit 0.
fn run_example(words: &[String]) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| format!("scratch dir: {e}"))?;
    run_ok(&words[1..], dir.path()).map(|_| ())
}

fn documents() -> Vec<(String, String)> {
    let root = root();
    let mut files = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str().map(String::from))
                .filter(|n| n.ends_with(".md"))
                .map(|n| format!("docs/{n}"))
                .collect()
        })
        .unwrap_or_default();
    docs.sort();
    files.extend(docs);
    files
        .into_iter()
        .map(|f| {
            let text =
                std::fs::read_to_string(root.join(&f)).unwrap_or_else(|e| panic!("{f}: {e}"));
            (f, text)
        })
        .collect()
}

/// The repository paths a text names (`docs/agent.md`, `scripts/vm`) that
/// do not exist: the project points only at files it ships.
fn missing_paths(root: &Path, text: &str) -> Vec<String> {
    const TOP: [&str; 7] =
        ["docs/", "scripts/", "scenarios/", "crates/", "deploy/", "tools/", "calibration/"];
    let path_char = |c: char| c.is_ascii_alphanumeric() || "_./*<>-".contains(c);
    let mut missing = Vec::new();
    for (i, _) in text.match_indices(|c: char| c.is_ascii_lowercase()) {
        if i > 0 && text[..i].chars().next_back().is_some_and(path_char) {
            continue;
        }
        let rest = &text[i..];
        if !TOP.iter().any(|t| rest.starts_with(t)) {
            continue;
        }
        let end = rest.find(|c: char| !path_char(c)).unwrap_or(rest.len());
        let path = rest[..end].trim_end_matches(['.', '-', '/']);
        if path.contains(['*', '<', '>']) || TOP.contains(&&rest[..end]) {
            continue;
        }
        if !root.join(path).exists() && !missing.contains(&path.to_string()) {
            missing.push(path.to_string());
        }
    }
    missing
}

fn report(problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{} broken example(s):\n\n{}",
        problems.len(),
        problems.join("\n\n")
    );
}

// ---------------------------------------------------------------------------
// The tests

#[test]
fn every_readme_and_docs_example_works() {
    let repo = Repo::new();
    let mut problems = Vec::new();
    let mut checked = 0;
    let mut ran = 0;
    for (file, text) in documents() {
        for ex in fenced_commands(&text, &file) {
            checked += 1;
            eprintln!("{}: {}", ex.place, ex.line);
            if let Err(e) = check_line(&repo, &ex.line) {
                problems.push(format!("{}: {e}", ex.place));
                continue;
            }
            for command in simple_commands(&shell_words(&ex.line)) {
                let words = strip_prefixes(&command);
                if words.first().map(String::as_str) != Some("overbook") {
                    continue;
                }
                let result =
                    if quick(&words) { Some(run_example(&words)) } else { dry_run_sim(&words) };
                if let Some(result) = result {
                    ran += 1;
                    if let Err(e) = result {
                        problems.push(format!("{}: {e}", ex.place));
                    }
                }
            }
        }
        for ex in inline_commands(&text, &file) {
            checked += 1;
            eprintln!("{}: `{}`", ex.place, ex.line);
            let words = match check_inline(&repo, &ex.line) {
                Ok(Some(words)) => words,
                Ok(None) => continue,
                Err(e) => {
                    problems.push(format!("{}: {e}", ex.place));
                    continue;
                }
            };
            let result =
                if quick(&words) { Some(run_example(&words)) } else { dry_run_sim(&words) };
            if let Some(result) = result {
                ran += 1;
                if let Err(e) = result {
                    problems.push(format!("{}: {e}", ex.place));
                }
            }
        }
    }
    let mut texts = documents();
    for entry in std::fs::read_dir(repo.root.join("scripts")).expect("scripts/").flatten() {
        let name = format!("scripts/{}", entry.file_name().to_string_lossy());
        if let Ok(text) = std::fs::read_to_string(entry.path()) {
            texts.push((name, text));
        }
    }
    for (file, text) in texts {
        for path in missing_paths(&repo.root, &text) {
            problems.push(format!("{file}: names {path}, which the repository does not have"));
        }
    }
    eprintln!("{checked} examples checked, {ran} run");
    assert!(checked > 40, "only {checked} examples found: is the markdown reader broken?");
    assert!(ran >= 3, "only {ran} examples run");
    report(&problems);
}

/// Every subcommand's path, from the root (`[]`, `["sim"]`, `["bench", "sim"]`).
fn subcommand_paths(cmd: &clap::Command, prefix: Vec<String>, all: &mut Vec<Vec<String>>) {
    all.push(prefix.clone());
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        let mut path = prefix.clone();
        path.push(sub.get_name().to_string());
        subcommand_paths(sub, path, all);
    }
}

/// The examples in one command's help text: backticked `overbook …`
/// commands, and backticked `--flag …` examples completed into the command
/// that has the flag (this one, else the last `overbook …` the text names).
fn help_examples(path: &[String], help: &str) -> Result<Vec<Vec<String>>, String> {
    let mut examples = Vec::new();
    let mut last_named: Option<Vec<String>> = None;
    let (_, this) = subcommand_of(&[&["overbook".to_string()], path].concat());
    for span in backticked(help) {
        let words: Vec<String> = span.split_whitespace().map(String::from).collect();
        if words.first().map(String::as_str) == Some("overbook") && words.len() > 1 {
            let (named, _) = subcommand_of(&words);
            last_named = Some(named);
            examples.push(words);
        } else if words.first().is_some_and(|w| is_flag(w)) {
            let name = words[0].trim_start_matches('-').split('=').next().unwrap_or("");
            let owner = if has_long_flag(&this, name) {
                [&["overbook".to_string()], path].concat()
            } else {
                match &last_named {
                    Some(named) if has_long_flag(&subcommand_of(named).1, name) => named.clone(),
                    _ => {
                        return Err(format!(
                            "`overbook {} --help`: the example `{span}` is no flag of it{}",
                            path.join(" "),
                            last_named
                                .as_ref()
                                .map(|n| format!(" nor of `{}`", n.join(" ")))
                                .unwrap_or_default()
                        ))
                    }
                }
            };
            examples.push([owner, words].concat());
        }
    }
    Ok(examples)
}

#[test]
fn every_help_and_its_examples_work() {
    let repo = Repo::new();
    let scratch = tempfile::tempdir().expect("scratch dir");
    let mut paths = Vec::new();
    subcommand_paths(&overbook::Cli::command(), Vec::new(), &mut paths);
    let mut problems = Vec::new();
    let mut examples = 0;
    for path in &paths {
        let shown = format!("overbook {} --help", path.join(" "));
        let help = match run_ok(&[path.clone(), strings(&["--help"])].concat(), scratch.path()) {
            Ok(help) => help,
            Err(e) => {
                problems.push(e);
                continue;
            }
        };
        if help.trim().is_empty() {
            problems.push(format!("`{shown}` printed nothing"));
        }
        for missing in missing_paths(&repo.root, &help) {
            problems.push(format!("`{shown}` names {missing}, which the repository does not have"));
        }
        let found = match help_examples(path, &help) {
            Ok(found) => found,
            Err(e) => {
                problems.push(e);
                continue;
            }
        };
        for words in found {
            examples += 1;
            eprintln!("{shown}: {}", words.join(" "));
            if let Err(e) = check_overbook(&repo, &words) {
                problems.push(format!("{shown}: {e}"));
                continue;
            }
            // `sim`'s own examples run, small.
            if path.first().map(String::as_str) == Some("sim") && words[1] == "sim" {
                let mut small = words.clone();
                if !small.iter().any(|w| w == "--small") {
                    small.push("--small".into());
                }
                // Small, and short: an example may ask for a bigger
                // cluster (`--set cluster.nodes=200`), which a debug build
                // on a busy machine takes minutes to simulate for 2 h.
                small.extend(strings(&[
                    "--set",
                    "sim.horizon=\"10m\"",
                    "--set",
                    "sim.drain=\"10m\"",
                    "--no-progress",
                    "--no-plots",
                ]));
                if let Err(e) = run_example(&small) {
                    problems.push(format!("{shown}: {e}"));
                }
            }
        }
    }
    assert!(paths.len() > 10, "only {} commands found", paths.len());
    eprintln!("{} helps read, {examples} examples in them checked", paths.len());
    report(&problems);
}

#[test]
fn the_checks_catch_drift() {
    let repo = Repo::new();
    let bad = [
        ("overbook sim --no-such-flag", "--no-such-flag"),
        ("overbook sim --jobs many", "many"),
        ("overbook run --class royalty --name x -- true", "royalty"),
        ("overbook sim --scenario no-such-scenario", "no-such-scenario"),
        ("sudo target/release/overbook bench frobnicate", "frobnicate"),
        ("cargo test -p overbook --test no_such_target", "no_such_target"),
        ("cargo test -p no-such-package", "no-such-package"),
        ("cargo bench -p overbook-sim --bench nope", "nope"),
        ("scripts/vm frobnicate", "frobnicate"),
        ("scripts/vm test --only no_such_vm_test", "no_such_vm_test"),
        ("scripts/no-such-script", "no-such-script"),
        ("scripts/vm run -- target/release/overbook sim --bogus", "--bogus"),
        ("OVERBOOK_X=1 scripts/kube teleport", "teleport"),
        ("scripts/test-all now", "takes no subcommand"),
        ("kubectl apply -f deploy/kubernetes/99-nothing.yaml", "99-nothing.yaml"),
    ];
    for (line, named) in bad {
        match check_line(&repo, line) {
            Ok(()) => panic!("`{line}` passed the checks"),
            Err(e) => assert!(e.contains(named), "`{line}`: {e} does not name {named:?}"),
        }
    }
    for (span, named) in [
        ("overbook sim [--scenarioz NAME]", "scenarioz"),
        ("overbook preempt --how-much", "how-much"),
        ("overbook sim --list --jobs x", "x"),
    ] {
        match check_inline(&repo, span) {
            Ok(_) => panic!("`{span}` passed the checks"),
            Err(e) => assert!(e.contains(named), "`{span}`: {e} does not name {named:?}"),
        }
    }
    // A file the project does not ship.
    let missing = missing_paths(&repo.root, "see docs/TESTBED.md and docs/agent.md.");
    assert_eq!(missing, ["docs/TESTBED.md"]);
    // Help examples: a flag the command does not have.
    let e = help_examples(&strings(&["sim"]), "see `--sett a=b`").expect_err("a bad flag");
    assert!(e.contains("--sett"), "{e}");
    // And what is fine passes.
    for line in [
        "cargo test -p overbook --test examples",
        "OVERBOOK_VM_MEMORY=2G scripts/vm run -- target/release/overbook sim --small",
        "scripts/vm test --only bench_checkpoint",
        "cargo run --release -p overbook -- sim --list | head -1",
    ] {
        check_line(&repo, line).unwrap_or_else(|e| panic!("`{line}`: {e}"));
    }
    // A hang is a failure, not a stuck test: a child past its deadline is
    // killed and reported (here a workload that would hold 1 MiB for 10 min).
    let dir = tempfile::tempdir().expect("scratch dir");
    let started = Instant::now();
    let hung = run_overbook(
        &strings(&["workload", "anon", "1MiB", "600"]),
        dir.path(),
        Duration::from_secs(1),
    );
    match hung {
        Err(e) => assert!(e.contains("still running after"), "{e}"),
        Ok(ran) => panic!("a 600 s workload ended at once: {}{}", ran.stdout, ran.stderr),
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(run_ok(&strings(&["sim", "--list", "--names"]), dir.path()).is_ok());
    assert!(run_ok(&strings(&["sim", "--no-such-flag"]), dir.path()).is_err());
}

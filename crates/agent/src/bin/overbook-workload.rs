//! `overbook-workload anon SIZE [SECONDS]` or `overbook-workload file PATH
//! SIZE [SECONDS]`: the real workloads of [`overbook_agent::workload`], as a
//! process of their own to put in a container (tests and benchmarks).

use overbook_agent::config::parse_size_text;
use overbook_agent::workload::{run, Workload};
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let workload = match parse(&args) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("overbook-workload: {e}");
            eprintln!("usage: overbook-workload anon SIZE [SECONDS] | file PATH SIZE [SECONDS]");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&workload, &mut std::io::stdout().lock()) {
        eprintln!("overbook-workload: {e}");
        std::process::exit(1);
    }
}

fn parse(args: &[String]) -> Result<Workload, String> {
    let hold = |s: Option<&String>| -> Result<Option<Duration>, String> {
        s.map(|s| {
            s.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x > 0.0)
                .map(Duration::from_secs_f64)
                .ok_or_else(|| format!("{s:?} is not a number of seconds"))
        })
        .transpose()
    };
    match args.first().map(String::as_str) {
        Some("anon") if (2..=3).contains(&args.len()) => {
            Ok(Workload::Anon { size: parse_size_text(&args[1])?, hold: hold(args.get(2))? })
        }
        Some("file") if (3..=4).contains(&args.len()) => Ok(Workload::File {
            path: args[1].clone().into(),
            size: parse_size_text(&args[2])?,
            hold: hold(args.get(3))?,
        }),
        _ => Err(format!("bad arguments {args:?}")),
    }
}

//! `overbook-workload anon SIZE [SECONDS] ...` or `overbook-workload file
//! PATH SIZE [SECONDS] ...`: the real workloads of
//! [`crate::workload`], as a process of their own to put in a
//! container (tests and benchmarks).

use overbook_lab::workload::{run, Workload, USAGE};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let workload = match Workload::parse(&args) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("overbook-workload: {e}");
            eprintln!("usage: overbook-workload {USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&workload, &mut std::io::stdout().lock()) {
        eprintln!("overbook-workload: {e}");
        std::process::exit(1);
    }
}

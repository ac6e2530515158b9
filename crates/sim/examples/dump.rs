use overbook_sim::scenario::{self, Scenario};
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let s = Scenario::load(&args[1], &args[3..]).unwrap();
    let run = s.runs.iter().find(|r| r.name == args[2]).unwrap();
    let r = scenario::execute(run, &mut ()).unwrap();
    for o in &r.outcomes {
        println!(
            "{:?} sub={:?} start={:?} end={:?} done={} k={} thr={:?} work={:?}",
            o.key, o.submit, o.first_start, o.end, o.completed, o.kills, o.thrashing_time, o.work
        );
    }
    println!("{:?}", r.counters);
}

use overbook_sim::generate::Generator;
use overbook_sim::scenario::{Scenario, WorkloadSpec};
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let s = Scenario::load(&args[1], &args[2..]).unwrap();
    let run = &s.runs[0];
    let WorkloadSpec::Generate(table) = &run.spec.workload else { panic!() };
    let t = std::time::Instant::now();
    let g = Generator::from_spec(table, &run.spec).unwrap();
    let (mut n, mut pts) = (0u64, 0u64);
    for ev in g {
        if let Ok(overbook_sim::workload::WorkloadEvent::Submit(s)) = ev {
            n += 1;
            pts += s.profile.points().len() as u64;
        }
    }
    println!("tasks={n} points={pts} wall={:.2}s", t.elapsed().as_secs_f64());
}

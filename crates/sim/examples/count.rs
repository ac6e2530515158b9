use overbook_core::Class;
use overbook_sim::generate::Generator;
use overbook_sim::scenario::{Scenario, WorkloadSpec};
use overbook_sim::workload::WorkloadEvent;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let s = Scenario::load(&args[1], &args[2..]).unwrap();
    let run = &s.runs[0];
    let WorkloadSpec::Generate(t) = &run.spec.workload else { panic!() };
    println!("{t:?}");
    let g = Generator::from_spec(t, &run.spec).unwrap();
    let (mut p, mut b, mut pts, mut p0) = (0u64, 0u64, 0u64, 0u64);
    for e in g {
        if let Ok(WorkloadEvent::Submit(s)) = e {
            pts += s.profile.points().len() as u64;
            if s.class == Class::Production {
                p += 1;
                if s.submit.0 == 0 {
                    p0 += 1
                }
            } else {
                b += 1
            }
        }
    }
    println!("production {p} (at 0: {p0}) best-effort {b} points {pts}");
}

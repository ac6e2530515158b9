use overbook_core::Class;
use overbook_sim::scenario::{self, Scenario};
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let s = Scenario::load(&args[1], &args[2..]).unwrap();
    for run in &s.runs {
        let t = std::time::Instant::now();
        let r = scenario::execute(run, &mut ()).unwrap();
        let el = t.elapsed().as_secs_f64();
        for class in [Class::Production, Class::BestEffort] {
            let v: Vec<_> = r.outcomes.iter().filter(|o| o.class == class).collect();
            let done = v.iter().filter(|o| o.completed).count();
            let mut jct: Vec<f64> =
                v.iter().filter_map(|o| o.completion_time()).map(|d| d.as_secs_f64()).collect();
            jct.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let p = |q: f64| {
                if jct.is_empty() {
                    0.0
                } else {
                    jct[((jct.len() - 1) as f64 * q) as usize]
                }
            };
            let kills: u32 = v.iter().map(|o| o.kills).sum();
            let ck: u32 = v.iter().map(|o| o.checkpoints).sum();
            let rej: u32 = v.iter().map(|o| o.rejections).sum();
            let lost: f64 = v.iter().map(|o| o.lost_work.as_secs_f64()).sum::<f64>() / 3600.0;
            let thr: f64 = v.iter().map(|o| o.thrashing_time.as_secs_f64()).sum::<f64>() / 3600.0;
            println!("{:<28} {:?}: n={} done={} p50={:.0} p90={:.0} p99={:.0} kills={} ckpt={} rej={} lost_h={:.1} thrash_h={:.1}",
                run.name, class, v.len(), done, p(0.5), p(0.9), p(0.99), kills, ck, rej, lost, thr);
        }
        println!(
            "   events={} thrash_node_s={:.0} wall={:.2}s ev/s={:.2}M",
            r.counters.events,
            r.counters.thrashing_node_seconds,
            el,
            r.counters.events as f64 / el / 1e6
        );
    }
}

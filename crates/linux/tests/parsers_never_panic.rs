//! Every parser, fed arbitrary text, returns a value or an error naming its
//! file — it never panics. Inputs are random strings, random `key value`
//! lines over the keys the parsers know, and real fixtures with random edits.

use overbook_linux::parse::{
    ByteCount, CgroupEvents, CgroupProcs, CpuAcctUsage, CpuInfo, CpuStat, CpuTimes, FreezerState,
    Limit, MemInfo, MemoryEvents, MemoryStat, Mounts, Pressure, ProcCgroup, ProcessStat,
    ProcessStatus, SchedStat, Swaps, V1MemoryStat, VmStat,
};
use proptest::prelude::*;

/// Runs every parser on `text`; each error must name a file.
fn parse_all(text: &str) {
    fn check<T>(r: Result<T, overbook_linux::parse::ParseError>) {
        if let Err(e) = r {
            assert!(!e.file.is_empty());
            assert!(e.to_string().starts_with(e.file));
        }
    }
    check(MemoryStat::parse(text));
    check(V1MemoryStat::parse(text));
    check(MemoryEvents::parse(text));
    check(Pressure::parse(text));
    check(Pressure::parse_file(Pressure::SYSTEM_FILE, text));
    check(CgroupProcs::parse(text));
    check(ByteCount::parse("memory.current", text));
    check(Limit::parse("memory.max", text));
    check(MemInfo::parse(text));
    check(FreezerState::parse(text));
    check(CgroupEvents::parse(text));
    check(ProcCgroup::parse(text));
    check(Mounts::parse(text));
    check(VmStat::parse(text));
    check(CpuTimes::parse(text));
    check(ProcessStat::parse(text));
    check(SchedStat::parse(text));
    check(ProcessStatus::parse(text));
    check(Swaps::parse(text));
    check(CpuInfo::parse(text));
    check(CpuStat::parse(text));
    check(CpuAcctUsage::parse(text));
}

const FIXTURES: &[&str] = &[
    include_str!("fixtures/v2/memory.stat"),
    include_str!("fixtures/v2/memory.events"),
    include_str!("fixtures/v2/memory.pressure"),
    include_str!("fixtures/v2/cgroup.events"),
    include_str!("fixtures/v2/proc-self-cgroup"),
    include_str!("fixtures/v1/root/memory.stat"),
    include_str!("fixtures/v1/leaf/memory.stat"),
    include_str!("fixtures/v1/cgroup.procs"),
    include_str!("fixtures/v1/freezer.state"),
    include_str!("fixtures/proc/meminfo"),
    include_str!("fixtures/proc/mounts"),
    include_str!("fixtures/proc/self-cgroup"),
    include_str!("fixtures/proc/pressure-memory"),
    include_str!("fixtures/proc/vmstat"),
    include_str!("fixtures/proc/stat"),
    include_str!("fixtures/proc/pid-stat"),
    include_str!("fixtures/proc/pid-status"),
    include_str!("fixtures/proc/swaps"),
    include_str!("fixtures/proc/cpuinfo"),
    include_str!("fixtures/v2/cpu.stat"),
];

const KEYS: &[&str] = &[
    "anon",
    "file",
    "pgmajfault",
    "workingset_refault_anon",
    "total_swap",
    "some",
    "full",
    "avg10=",
    "total=",
    "MemTotal:",
    "SwapFree:",
    "kB",
    "cpu",
    "usage_usec",
    "nr_throttled",
    "pswpin",
    "VmHWM:",
    "Threads:",
    "Filename",
    "model name\t:",
    "(",
    ")",
    "max",
    "populated",
    "frozen",
    "FROZEN",
    "0::",
    "4:memory:",
    "cgroup2",
    "\\040",
    "é",
    "\0",
    "\t",
    "-1",
    "18446744073709551616",
];

/// A random edit of a fixture: cut, insert text, or duplicate a line.
fn mutate(fixture: &str, at: usize, insert: &str, op: u8) -> String {
    let mut cut = at % (fixture.len() + 1);
    while !fixture.is_char_boundary(cut) {
        cut -= 1;
    }
    let (head, tail) = fixture.split_at(cut);
    match op % 4 {
        0 => format!("{head}{insert}{tail}"),
        1 => head.to_owned(),
        2 => format!("{head}{tail}{head}"),
        _ => format!("{insert}{}", tail.replacen(' ', insert, 1)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_text(text in any::<String>()) {
        parse_all(&text);
    }

    #[test]
    fn key_value_lines(
        lines in prop::collection::vec(
            (prop::sample::select(KEYS), prop::sample::select(KEYS), "[0-9.=a-z -]{0,24}"),
            0..40,
        )
    ) {
        let text: String =
            lines.iter().map(|(k, v, junk)| format!("{k} {v}{junk}\n")).collect();
        parse_all(&text);
    }

    #[test]
    fn edited_fixtures(
        which in 0..FIXTURES.len(),
        at in any::<usize>(),
        insert in prop::sample::select(KEYS),
        op in any::<u8>(),
    ) {
        parse_all(&mutate(FIXTURES[which], at, insert, op));
    }

    #[test]
    fn limits_round_trip(bytes in any::<u64>()) {
        let limit = Limit::Bytes(bytes);
        prop_assert_eq!(Limit::parse("memory.max", &format!("{limit}\n")), Ok(limit));
    }
}

#[test]
fn every_fixture_parses_as_its_own_file() {
    assert!(MemoryStat::parse(FIXTURES[0]).is_ok());
    assert!(MemoryEvents::parse(FIXTURES[1]).is_ok());
    assert!(Pressure::parse(FIXTURES[2]).is_ok());
    assert!(CgroupEvents::parse(FIXTURES[3]).is_ok());
    assert!(ProcCgroup::parse(FIXTURES[4]).is_ok());
    assert!(V1MemoryStat::parse(FIXTURES[5]).is_ok());
    assert!(V1MemoryStat::parse(FIXTURES[6]).is_ok());
    assert!(CgroupProcs::parse(FIXTURES[7]).is_ok());
    assert!(FreezerState::parse(FIXTURES[8]).is_ok());
    assert!(MemInfo::parse(FIXTURES[9]).is_ok());
    assert!(Mounts::parse(FIXTURES[10]).is_ok());
    assert!(ProcCgroup::parse(FIXTURES[11]).is_ok());
    assert!(Pressure::parse_file(Pressure::SYSTEM_FILE, FIXTURES[12]).is_ok());
    assert!(VmStat::parse(FIXTURES[13]).is_ok());
    assert!(CpuTimes::parse(FIXTURES[14]).is_ok());
    assert!(CpuStat::parse(FIXTURES[19]).is_ok());
}

//! Task and job identities from a trace's own names and numbers.
//!
//! Traces name tasks by several fields (Google: job and index; Alibaba:
//! job, task, instance), sometimes as text. The stream needs one `u64`, so
//! the fields are hashed (64-bit FNV-1a, stable across runs and platforms).
//! With 25 million tasks (the whole 2011 trace) the chance of any collision
//! is about 2e-5; a namespace per kind of thing keeps, say, Alibaba's batch
//! jobs and container groups apart.

use crate::workload::TaskKey;
use overbook_core::JobId;

/// One field of an identity.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Part<'a> {
    Num(u64),
    Text(&'a str),
}

pub(crate) fn hash(namespace: &str, parts: &[Part<'_>]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(PRIME);
        }
    };
    eat(namespace.as_bytes());
    for part in parts {
        // A tag and a terminator per part: ("ab", "c") and ("a", "bc"),
        // or the number 7 and the text "7", never hash alike by construction.
        match part {
            Part::Num(n) => {
                eat(&[0xfe]);
                eat(&n.to_le_bytes());
            }
            Part::Text(s) => {
                eat(&[0xfd]);
                eat(s.as_bytes());
                eat(&[0xff]);
            }
        }
    }
    h
}

pub(crate) fn task(namespace: &str, parts: &[Part<'_>]) -> TaskKey {
    TaskKey(hash(namespace, parts))
}

pub(crate) fn job(namespace: &str, parts: &[Part<'_>]) -> JobId {
    JobId(hash(namespace, parts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_differ_by_namespace_and_part_boundaries() {
        let a = hash("x", &[Part::Text("ab"), Part::Text("c")]);
        let b = hash("x", &[Part::Text("a"), Part::Text("bc")]);
        let c = hash("y", &[Part::Text("ab"), Part::Text("c")]);
        assert!(a != b && a != c && b != c);
        assert_eq!(a, hash("x", &[Part::Text("ab"), Part::Text("c")]));
        assert_ne!(hash("x", &[Part::Num(7)]), hash("x", &[Part::Text("7")]));
    }
}

//! Preemptors: how the chosen container pays (kill, freeze, checkpoint, or
//! the adaptive choice of 004 Algorithm 1), and where a checkpointed task is
//! resumed (004 Algorithm 2).

mod adaptive;
mod fixed;
mod production_first;
mod schedule;
mod swap_pace;

pub use schedule::{checkpoint_fallback, pre_dump_due, PreDumpCandidate};
pub use swap_pace::SwapPace;

use crate::action::{Preemption, ResumeSite};
use crate::config::{check_range, ConfigError};
use crate::model::{Bytes, ContainerStats};
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// What a preemptor knows of the node's checkpoint machinery right now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PreemptContext {
    pub now: Time,
    /// Write and read bandwidth of the image store, bytes per second.
    pub store: StoreBandwidth,
    /// How long until the node's checkpoint queue is free (one dump at a time).
    pub dump_backlog: Duration,
    /// Whether checkpoints can be taken at all here (CRIU works).
    pub can_checkpoint: bool,
    /// Whether incremental dumps work here (soft-dirty tracking).
    pub can_incremental: bool,
    /// Whether a production or critical container is stalling now, waiting
    /// for the memory this preemption frees.
    pub production_waiting: bool,
    /// Free swap on the node now: a frozen victim's memory can go there.
    pub swap_room: Bytes,
    /// How fast the node writes (and reads back) pages to swap, bytes per
    /// second.
    pub swap_write: f64,
}

/// Bandwidths of an image store, bytes per second.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoreBandwidth {
    pub write: f64,
    pub read: f64,
    /// Network bandwidth to the shared store, for remote resume.
    pub net: f64,
}

/// One preemptor stage.
pub trait Preemptor: fmt::Debug + Send {
    fn name(&self) -> &'static str;
    fn choose(&self, victim: &ContainerStats, ctx: &PreemptContext) -> Preemption;
}

/// Which preemptor (`[preemptor]` in config).
///
/// Variants without parameters are empty struct variants, not unit variants,
/// so that a stray key next to `kind` is refused (serde ignores every other
/// key next to the tag of an internally tagged unit variant).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum PreemptorConfig {
    /// 000: kill the whole container; its work is lost.
    Kill {},
    /// 002: freeze it (`Preemption::Freeze`); memory stays, coldest to reclaim.
    Suspend {},
    /// Freeze it, then push its memory out to swap.
    SuspendAndSwapOut {},
    /// 004 §3: always checkpoint (a kill where CRIU does not work).
    Checkpoint {
        /// Dump only what changed when the victim has an earlier image and
        /// the node tracks soft-dirty pages (004 §4.1).
        #[serde(default = "default_true")]
        incremental: bool,
    },
    /// 004 Algorithm 1: checkpoint when the work done exceeds dump + restore
    /// + dump-queue time, else kill.
    Adaptive {
        #[serde(default = "default_true")]
        incremental: bool,
    },
    /// overbook: the victim's work kept by the cheaper of a checkpoint and
    /// a freeze-and-swap-out (where swap has room for it) when it has run
    /// longer than moving its memory out and back takes (004's Algorithm
    /// 1), else a kill; once production stalls, a way is open only if it
    /// frees the memory within `production_wait` seconds, that wait counted
    /// as a cost.
    ProductionFirst {
        #[serde(default = "default_true")]
        incremental: bool,
        #[serde(default = "default_production_wait")]
        production_wait: f64,
    },
}

fn default_production_wait() -> f64 {
    0.5
}

impl Default for PreemptorConfig {
    fn default() -> PreemptorConfig {
        PreemptorConfig::Kill {}
    }
}

fn default_true() -> bool {
    true
}

impl PreemptorConfig {
    /// `production-first` with its defaults.
    pub fn production_first() -> PreemptorConfig {
        PreemptorConfig::ProductionFirst {
            incremental: true,
            production_wait: default_production_wait(),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            PreemptorConfig::Kill {} => "kill",
            PreemptorConfig::Suspend {} => "suspend",
            PreemptorConfig::SuspendAndSwapOut {} => "suspend-and-swap-out",
            PreemptorConfig::Checkpoint { .. } => "checkpoint",
            PreemptorConfig::Adaptive { .. } => "adaptive",
            PreemptorConfig::ProductionFirst { .. } => "production-first",
        }
    }

    /// The store's bandwidths are the node's, not the policy's: only
    /// production's wait is checked.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match *self {
            PreemptorConfig::ProductionFirst { production_wait, .. } => {
                check_range("production_wait", production_wait, 0.0, 600.0)
            }
            _ => Ok(()),
        }
    }

    pub fn build(&self) -> Box<dyn Preemptor> {
        let fixed = |how| Box::new(fixed::Fixed { name: self.name(), how });
        match *self {
            PreemptorConfig::Kill {} => fixed(Preemption::Kill),
            PreemptorConfig::Suspend {} => fixed(Preemption::Freeze),
            PreemptorConfig::SuspendAndSwapOut {} => fixed(Preemption::FreezeAndSwapOut),
            PreemptorConfig::Checkpoint { incremental } => {
                Box::new(fixed::Checkpoint { incremental })
            }
            PreemptorConfig::Adaptive { incremental } => {
                Box::new(adaptive::Adaptive { incremental })
            }
            PreemptorConfig::ProductionFirst { incremental, production_wait } => {
                Box::new(production_first::ProductionFirst {
                    incremental,
                    production_wait: Duration::from_secs_f64(production_wait.clamp(0.0, 600.0)),
                })
            }
        }
    }
}

/// Whether a dump of `victim` can be incremental: wanted, supported on this
/// node (soft-dirty tracking), and built on an earlier image.
fn incremental(wanted: bool, victim: &ContainerStats, ctx: &PreemptContext) -> bool {
    wanted && ctx.can_incremental && victim.image.is_some()
}

/// Seconds to move `bytes` at `bandwidth` bytes per second. A bandwidth that
/// is zero, negative or not a number means the transfer never finishes, so
/// whatever needs it loses every comparison instead of producing NaN.
fn transfer_secs(bytes: Bytes, bandwidth: f64) -> f64 {
    if bytes == 0 {
        0.0
    } else if bandwidth > 0.0 {
        bytes as f64 / bandwidth
    } else {
        f64::INFINITY
    }
}

/// 004 Algorithm 2: restore where it is cheaper, local or remote; restart
/// when there is no image.
///
/// Local: read the image + wait for the local queue. Remote: ship it over the
/// network, read it + wait for the remote queue. Ties stay local (no data
/// moves). A caller whose image is not on a shared store, or that has no
/// other node, passes `Duration::MAX` as `remote_queue`.
pub fn choose_resume_site(
    image: Option<Bytes>,
    store: &StoreBandwidth,
    local_queue: Duration,
    remote_queue: Duration,
) -> ResumeSite {
    let Some(size) = image else {
        return ResumeSite::Restart;
    };
    let read = transfer_secs(size, store.read);
    let local = read + local_queue.as_secs_f64();
    let remote = transfer_secs(size, store.net) + read + remote_queue.as_secs_f64();
    if local <= remote {
        ResumeSite::Local
    } else {
        ResumeSite::Remote
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Class, ContainerId, ImageInfo, JobId};

    const GB: Bytes = 1_000_000_000;
    const STORE: StoreBandwidth = StoreBandwidth { write: 1e9, read: 1e9, net: 0.5e9 };

    fn ctx() -> PreemptContext {
        PreemptContext {
            now: Time::from_secs(10),
            store: STORE,
            dump_backlog: Duration::ZERO,
            can_checkpoint: true,
            can_incremental: true,
            production_waiting: false,
            swap_room: 0,
            swap_write: 1e9,
        }
    }

    #[test]
    fn resume_site_follows_algorithm_2() {
        let s = |img, local, remote| {
            choose_resume_site(img, &STORE, Duration::from_secs(local), Duration::from_secs(remote))
        };
        assert_eq!(s(None, 0, 0), ResumeSite::Restart);
        assert_eq!(s(None, 1000, 0), ResumeSite::Restart);
        // Equal queues: the network costs 2 s more remotely.
        assert_eq!(s(Some(GB), 0, 0), ResumeSite::Local);
        assert_eq!(s(Some(GB), 2, 0), ResumeSite::Local, "a tie stays local");
        assert_eq!(s(Some(GB), 3, 0), ResumeSite::Remote, "a long local queue sends it away");
        assert_eq!(s(Some(GB), 30, 20), ResumeSite::Remote);
        assert_eq!(s(Some(GB), 3, 1), ResumeSite::Local);
        assert_eq!(
            choose_resume_site(Some(GB), &STORE, Duration::from_secs(3600), Duration::MAX),
            ResumeSite::Local,
            "no remote option"
        );
    }

    #[test]
    fn resume_site_survives_broken_bandwidths() {
        for net in [0.0, -5.0, f64::NAN] {
            let store = StoreBandwidth { net, ..STORE };
            assert_eq!(
                choose_resume_site(Some(GB), &store, Duration::from_secs(100), Duration::ZERO),
                ResumeSite::Local
            );
        }
        let no_read = StoreBandwidth { read: 0.0, ..STORE };
        assert_eq!(
            choose_resume_site(Some(GB), &no_read, Duration::ZERO, Duration::ZERO),
            ResumeSite::Local
        );
        assert_eq!(
            choose_resume_site(Some(0), &STORE, Duration::from_secs(1), Duration::ZERO),
            ResumeSite::Remote
        );
    }

    #[test]
    fn fixed_preemptors_pay_their_one_way() {
        let v = ContainerStats::new(ContainerId(1), JobId(1), Class::BestEffort, Time::ZERO);
        let cases = [
            (PreemptorConfig::Kill {}, Preemption::Kill),
            (PreemptorConfig::Suspend {}, Preemption::Freeze),
            (PreemptorConfig::SuspendAndSwapOut {}, Preemption::FreezeAndSwapOut),
        ];
        for (cfg, how) in cases {
            let p = cfg.build();
            assert_eq!(p.name(), cfg.name());
            assert_eq!(p.choose(&v, &ctx()), how);
            assert_eq!(p.choose(&v, &PreemptContext { can_checkpoint: false, ..ctx() }), how);
        }
    }

    #[test]
    fn checkpoint_is_incremental_only_on_an_earlier_image_and_kills_without_criu() {
        let mut v = ContainerStats::new(ContainerId(1), JobId(1), Class::BestEffort, Time::ZERO);
        v.usage = GB;
        let p = PreemptorConfig::Checkpoint { incremental: true }.build();
        assert_eq!(p.choose(&v, &ctx()), Preemption::Checkpoint { incremental: false });
        v.image = Some(ImageInfo { size: GB, taken_at: Time::ZERO, shared: true });
        assert_eq!(p.choose(&v, &ctx()), Preemption::Checkpoint { incremental: true });
        assert_eq!(
            p.choose(&v, &PreemptContext { can_incremental: false, ..ctx() }),
            Preemption::Checkpoint { incremental: false }
        );
        let full = PreemptorConfig::Checkpoint { incremental: false }.build();
        assert_eq!(full.choose(&v, &ctx()), Preemption::Checkpoint { incremental: false });
        assert_eq!(
            p.choose(&v, &PreemptContext { can_checkpoint: false, ..ctx() }),
            Preemption::Kill
        );
    }

    #[test]
    fn every_preemptor_parses_from_toml() {
        let parse =
            |t: &str| toml::from_str::<PreemptorConfig>(t).unwrap_or_else(|e| panic!("{t}: {e}"));
        assert_eq!(parse("kind = \"kill\""), PreemptorConfig::Kill {});
        assert_eq!(parse("kind = \"suspend\""), PreemptorConfig::Suspend {});
        assert_eq!(parse("kind = \"suspend-and-swap-out\""), PreemptorConfig::SuspendAndSwapOut {});
        assert_eq!(
            parse("kind = \"checkpoint\""),
            PreemptorConfig::Checkpoint { incremental: true }
        );
        assert_eq!(
            parse("kind = \"checkpoint\"\nincremental = false"),
            PreemptorConfig::Checkpoint { incremental: false }
        );
        assert_eq!(parse("kind = \"adaptive\""), PreemptorConfig::Adaptive { incremental: true });
        assert_eq!(
            parse("kind = \"adaptive\"\nincremental = false"),
            PreemptorConfig::Adaptive { incremental: false }
        );
        assert!(toml::from_str::<PreemptorConfig>("kind = \"freeze\"").is_err());
        assert!(toml::from_str::<PreemptorConfig>("kind = \"adaptive\"\nincremental = 1").is_err());
        assert!(toml::from_str::<PreemptorConfig>("kind = \"adaptive\"\nbandwidth = 1").is_err());
        for cfg in [PreemptorConfig::Kill {}, PreemptorConfig::Adaptive { incremental: true }] {
            assert_eq!(cfg.validate(), Ok(()));
            assert_eq!(cfg.build().name(), cfg.name());
        }
    }
}

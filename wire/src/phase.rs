//! The phases of a partition record, declared once.
//!
//! Every reader and writer of a phase takes what it needs from [`Phase::SPECS`]:
//! the prover's recorder and its `GPU_TIMING` line, the report's tables and
//! charts, the Prometheus metrics, the experiment judge's metric names and
//! `docs/timing.md` (its phase table is [`markdown_table`], checked by a
//! test). Adding a phase is one line in the `phases!` list below, plus the
//! place in the prover that measures it.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The unit a phase is recorded in (the record's `phases_ms` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Ms,
}

impl Unit {
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Ms => "ms",
        }
    }

    /// Seconds in one of the unit (Prometheus exports seconds).
    pub fn seconds(self) -> f64 {
        match self {
            Unit::Ms => 1e-3,
        }
    }
}

/// Which clock measures a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Clock {
    /// The host's wall clock around the work: waiting and CPU work inside
    /// it count. Where the work ran on a device, the record also carries
    /// the device's own time and the wait for the device apart
    /// ([`crate::timing::PhaseSplit`]).
    Host,
    /// CUDA events on the device's streams on a device backend (the host's
    /// wall clock on the CPU backend, which has no device).
    Device,
}

impl Clock {
    pub fn as_str(self) -> &'static str {
        match self {
            Clock::Host => "host wall",
            Clock::Device => "device events",
        }
    }
}

/// Where in a partition's life a phase runs, against the TIMELINE events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Before the device worker takes the partition (before `gpu_start`).
    Host,
    /// Inside the device worker's call (`gpu_start..gpu_end`): the device timeline.
    Device,
    /// After the device worker released the device (after `gpu_end`).
    After,
    /// The whole partition.
    Whole,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Host => "host",
            Stage::Device => "device",
            Stage::After => "after",
            Stage::Whole => "whole",
        }
    }
}

/// What is known about one phase.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PhaseSpec {
    pub phase: Phase,
    /// The snake_case name in JSON, log lines, metric labels and metric names.
    pub name: &'static str,
    pub unit: Unit,
    pub clock: Clock,
    pub stage: Stage,
    /// The phase whose time includes this one's, if any: readers summing
    /// phases take either the whole or its parts, never both.
    pub part_of: Option<Phase>,
    /// One line for the docs.
    pub doc: &'static str,
}

macro_rules! phases {
    ($( $variant:ident = $name:literal, $clock:ident, $stage:ident, $part:expr, $doc:literal; )*) => {
        /// A phase of proving one partition (see [`Phase::SPECS`]). The
        /// declaration order is the order of every table.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum Phase {
            $(
                #[doc = $doc]
                #[serde(rename = $name)]
                $variant,
            )*
            /// A phase written by a newer prover that this reader does not know.
            #[serde(other, rename = "unknown")]
            Unknown,
        }

        impl Phase {
            /// Every known phase, in table order.
            pub const ALL: &'static [Phase] = &[$(Phase::$variant),*];

            /// The declaration of every known phase, in table order.
            pub const SPECS: &'static [PhaseSpec] = &[$(PhaseSpec {
                phase: Phase::$variant,
                name: $name,
                unit: Unit::Ms,
                clock: Clock::$clock,
                stage: Stage::$stage,
                part_of: $part,
                doc: $doc,
            }),*];

            /// The snake_case name used in JSON, log lines and metric labels.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Phase::$variant => $name,)*
                    Phase::Unknown => "unknown",
                }
            }
        }
    };
}

// name, clock, stage, the phase it is part of, what it is.
phases! {
    QueueWait = "queue_wait", Host, Host, None,
        "Time from submission until a synthesis worker picked the partition up.";
    BudgetWait = "budget_wait", Host, Host, None,
        "Time blocked waiting for the memory budget to admit the partition.";
    PoolCheckout = "pool_checkout", Host, Host, None,
        "Checking the a/b/c and assignment buffers out of the pinned pool.";
    Synthesis = "synthesis", Host, Host, None,
        "Running the circuit's `synthesize` into the pinned buffers.";
    Witness = "witness", Host, Host, Some(Phase::Synthesis),
        "Of a synthesis from compiled constraints: the witness-only pass (the circuit's `synthesize`, assignments only).";
    Abc = "abc", Host, Host, Some(Phase::Synthesis),
        "Of a synthesis from compiled constraints: a, b, c as sparse products of the recorded A, B, C with the witness, on the host's cores.";
    GpuLockWait = "gpu_lock_wait", Host, Host, None,
        "Waiting for a device worker (its queue) after synthesis.";
    H2d = "h2d", Device, Device, Some(Phase::NttKernels),
        "Host-to-device copy of a, b, c (the record's `h2d_*` fields cover every copy).";
    AbcDevice = "abc_device", Device, Device, Some(Phase::NttKernels),
        "Of an h computation from compiled constraints on a device: the witness upload and a, b, c as sparse products there (in place of h2d of a, b, c).";
    NttIfft = "ntt_ifft", Device, Device, Some(Phase::NttKernels),
        "Inverse NTT of a, b and c.";
    NttCosetFft = "ntt_coset_fft", Device, Device, Some(Phase::NttKernels),
        "Coset NTT of a and b (c's coset NTT would only be undone by the coset inverse NTT, so it is skipped).";
    NttMulSubDivZ = "ntt_mul_sub_div_z", Device, Device, Some(Phase::NttKernels),
        "Coefficient-wise a*b over Z on the coset and c's coefficients over Z (on a device fused into neighbouring passes, ~0).";
    NttCosetIfft = "ntt_coset_ifft", Device, Device, Some(Phase::NttKernels),
        "Coset inverse NTT of a*b over Z, less c's coefficients over Z: h.";
    NttKernels = "ntt_kernels", Host, Device, None,
        "The whole h computation (uploads, NTTs, and the download of h where the h MSM runs on the host's copy), from when the backend holds the device (a wait for it is device wait).";
    MsmH = "msm_h", Host, Device, Some(Phase::Msm),
        "Multi-exponentiation of h against `params.h` (G1); on a device it reads h where the NTT left it, right after ntt_kernels.";
    MsmL = "msm_l", Host, Device, Some(Phase::Msm),
        "Multi-exponentiation of the aux assignment against `params.l` (G1; on its own host thread beside A's and B's).";
    MsmA = "msm_a", Host, Device, Some(Phase::Msm),
        "Multi-exponentiation for A (G1; on its own host thread beside l's and B's).";
    MsmBG1 = "msm_b_g1", Host, Device, Some(Phase::Msm),
        "Multi-exponentiation for B in G1 (beside l's and A's, after the quotient).";
    MsmBG2 = "msm_b_g2", Host, Device, Some(Phase::Msm),
        "Multi-exponentiation for B in G2 (on its own host thread, beside the quotient and the G1 ones).";
    Msm = "msm", Host, Device, None,
        "All multi-exponentiations together: the span of the quotient and the MSMs less ntt_kernels (the G2 MSM starts beside the quotient).";
    Assembly = "assembly", Host, Device, None,
        "Combining the MSM results with r, s into A, B, C.";
    Verify = "verify", Host, After, None,
        "Checking the proof against the verifying key, after the device was released.";
    Total = "total", Host, Whole, None,
        "Wall time of the whole partition, queue wait included.";
}

impl Phase {
    /// The declaration of a known phase (None for [`Phase::Unknown`]).
    pub fn spec(self) -> Option<&'static PhaseSpec> {
        Phase::SPECS.iter().find(|s| s.phase == self)
    }

    /// The known phase of that name.
    pub fn from_name(name: &str) -> Option<Phase> {
        Phase::SPECS
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.phase)
    }

    pub fn clock(self) -> Clock {
        self.spec().map_or(Clock::Host, |s| s.clock)
    }

    pub fn stage(self) -> Option<Stage> {
        self.spec().map(|s| s.stage)
    }

    pub fn part_of(self) -> Option<Phase> {
        self.spec().and_then(|s| s.part_of)
    }

    /// The phases whose time this one's includes.
    pub fn parts(self) -> impl Iterator<Item = Phase> {
        Phase::SPECS
            .iter()
            .filter(move |s| s.part_of == Some(self))
            .map(|s| s.phase)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The phases of `stage` that `has` says a record carries, each counted
/// once: a phase with parts is taken whole when present, else its parts.
/// The one rule by which readers sum a stage (the device worker's time, the
/// breakdown chart) without counting a phase and its parts twice.
pub fn summable(stage: Stage, has: impl Fn(Phase) -> bool) -> Vec<Phase> {
    let mut out = Vec::new();
    for s in Phase::SPECS.iter().filter(|s| s.stage == stage) {
        match s.part_of {
            // A part is taken only where its whole is absent.
            Some(whole) if has(whole) => {}
            Some(_) => out.push(s.phase),
            None if has(s.phase) => out.push(s.phase),
            None => {}
        }
    }
    out.retain(|p| has(*p));
    out
}

/// The phase table of `docs/timing.md`, generated from [`Phase::SPECS`].
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| phase | unit | clock | stage | part of | what |\n|---|---|---|---|---|---|\n",
    );
    for s in Phase::SPECS {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} |\n",
            s.name,
            s.unit.as_str(),
            s.clock.as_str(),
            s.stage.as_str(),
            s.part_of
                .map_or_else(|| "-".to_string(), |p| format!("`{p}`")),
            s.doc
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_snake_case_and_round_trip_through_json() {
        let mut names: Vec<&str> = Phase::SPECS.iter().map(|s| s.name).collect();
        for n in &names {
            assert!(
                n.starts_with(|c: char| c.is_ascii_lowercase())
                    && n.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{n}"
            );
        }
        for s in Phase::SPECS {
            let json = serde_json::to_string(&s.phase).unwrap();
            assert_eq!(json, format!("\"{}\"", s.name));
            assert_eq!(serde_json::from_str::<Phase>(&json).unwrap(), s.phase);
            assert_eq!(Phase::from_name(s.name), Some(s.phase));
            assert_eq!(s.phase.as_str(), s.name);
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Phase::ALL.len());
        // Table order is declaration order, and Ord follows it.
        assert!(Phase::ALL.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(
            serde_json::from_str::<Phase>("\"warp_drive\"").unwrap(),
            Phase::Unknown
        );
    }

    #[test]
    fn a_whole_is_a_phase_of_its_parts_stage_and_is_no_part_itself() {
        for s in Phase::SPECS {
            if let Some(whole) = s.part_of {
                let w = whole.spec().unwrap();
                assert_eq!(w.stage, s.stage, "{}", s.name);
                assert_eq!(w.part_of, None, "{}", s.name);
            }
        }
        let msm: Vec<Phase> = Phase::Msm.parts().collect();
        assert_eq!(
            msm,
            [
                Phase::MsmH,
                Phase::MsmL,
                Phase::MsmA,
                Phase::MsmBG1,
                Phase::MsmBG2
            ]
        );
    }

    #[test]
    fn summable_takes_a_whole_or_its_parts_never_both() {
        let has = |set: &'static [Phase]| move |p: Phase| set.contains(&p);
        // Whole and parts present: the whole alone.
        let got = summable(
            Stage::Device,
            has(&[Phase::NttKernels, Phase::H2d, Phase::MsmL, Phase::Msm]),
        );
        assert_eq!(got, [Phase::NttKernels, Phase::Msm]);
        // Parts without their whole: the parts.
        let got = summable(
            Stage::Device,
            has(&[Phase::NttIfft, Phase::MsmL, Phase::MsmA, Phase::Assembly]),
        );
        assert_eq!(
            got,
            [Phase::NttIfft, Phase::MsmL, Phase::MsmA, Phase::Assembly]
        );
        assert_eq!(
            summable(Stage::Host, has(&[Phase::Synthesis, Phase::Msm])),
            [Phase::Synthesis]
        );
    }

    /// `docs/timing.md` carries the generated table between its markers.
    /// `BLESS=1 cargo test -p fleet-wire` rewrites it.
    #[test]
    fn docs_timing_md_lists_exactly_the_declared_phases() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/timing.md");
        let text = std::fs::read_to_string(&path).unwrap();
        let (begin, end) = ("<!-- phases:begin -->\n", "<!-- phases:end -->");
        let start = text.find(begin).expect("phases:begin marker") + begin.len();
        let stop = text.find(end).expect("phases:end marker");
        let want = markdown_table();
        if text[start..stop] != want {
            if std::env::var_os("BLESS").is_some() {
                let fixed = format!("{}{want}{}", &text[..start], &text[stop..]);
                std::fs::write(&path, fixed).unwrap();
            } else {
                panic!(
                    "docs/timing.md's phase table is not the declared one; \
                     BLESS=1 rewrites it to:\n{want}"
                );
            }
        }
    }
}

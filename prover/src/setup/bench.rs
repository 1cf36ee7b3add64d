//! Times our parameter generation (on the CPU, and on a GPU when given one)
//! against bellperson's `generate_random_parameters`.

use std::time::Instant;

use bellperson::groth16::generate_random_parameters;
use blstrs::Bls12;
use comfy_table::{presets::ASCII_MARKDOWN, Table};
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;

use super::fixed_base::FixedBaseEngine;
use super::{generate, generate_on, SetupError};
use crate::circuit::{self, CircuitKind};

/// One size of the setup benchmark.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SetupBenchRow {
    pub circuit: CircuitKind,
    pub size: usize,
    pub log2_domain: u32,
    pub constraints: usize,
    pub ours_s: f64,
    /// Ours with the fixed-base multiplications on the GPU, when timed.
    pub cuda_s: Option<f64>,
    pub bellperson_s: f64,
    /// Whether all produced the very same parameters (same seeded RNG).
    pub identical: bool,
}

impl SetupBenchRow {
    pub fn speedup(&self) -> f64 {
        self.bellperson_s / self.ours_s.max(f64::MIN_POSITIVE)
    }
}

/// Generates parameters for `kind` at each size with both generators (and
/// ours on `device` too, when given) from the same seed, timing each and
/// checking they agree.
pub fn bench_setup(
    kind: CircuitKind,
    sizes: &[usize],
    seed: u64,
    device: Option<&dyn FixedBaseEngine>,
) -> Result<Vec<SetupBenchRow>, SetupError> {
    let mut rows = Vec::with_capacity(sizes.len());
    for &size in sizes {
        let shape = circuit::shape(kind, size)?;
        let circuit = circuit::shape_circuit(kind, size)?;

        let started = Instant::now();
        let ours = generate(&circuit, seed)?;
        let ours_s = started.elapsed().as_secs_f64();

        let (cuda_s, device_same) = match device {
            Some(engine) => {
                let started = Instant::now();
                let theirs = generate_on(&circuit, seed, engine)?;
                (Some(started.elapsed().as_secs_f64()), theirs == ours)
            }
            None => (None, true),
        };

        let started = Instant::now();
        let theirs = generate_random_parameters::<Bls12, _, _>(
            circuit,
            &mut ChaCha20Rng::seed_from_u64(seed),
        )
        .map_err(|source| SetupError::Synthesis {
            stage: "running bellperson's generator",
            source,
        })?;
        let bellperson_s = started.elapsed().as_secs_f64();

        let row = SetupBenchRow {
            circuit: kind,
            size,
            log2_domain: shape.log2_domain(),
            constraints: shape.num_constraints,
            ours_s,
            cuda_s,
            bellperson_s,
            identical: device_same && ours == theirs,
        };
        tracing::info!(
            circuit = %kind,
            size,
            ours_s,
            cuda_s,
            bellperson_s,
            speedup = row.speedup(),
            identical = row.identical,
            "setup benchmark"
        );
        rows.push(row);
    }
    Ok(rows)
}

/// The benchmark as a Markdown-compatible table; a `cuda (s)` column when
/// any row timed the GPU.
pub fn render_table(rows: &[SetupBenchRow]) -> String {
    let cuda = rows.iter().any(|r| r.cuda_s.is_some());
    let mut header = vec!["circuit", "size", "domain", "constraints", "ours (s)"];
    if cuda {
        header.push("cuda (s)");
    }
    header.extend(["bellperson (s)", "speedup", "identical"]);
    let mut table = Table::new();
    table.load_preset(ASCII_MARKDOWN).set_header(header);
    for r in rows {
        let mut row = vec![
            r.circuit.to_string(),
            r.size.to_string(),
            format!("2^{}", r.log2_domain),
            r.constraints.to_string(),
            format!("{:.3}", r.ours_s),
        ];
        if cuda {
            row.push(r.cuda_s.map_or_else(|| "-".into(), |s| format!("{s:.3}")));
        }
        row.extend([
            format!("{:.3}", r.bellperson_s),
            format!("{:.1}x", r.speedup()),
            if r.identical { "yes" } else { "NO" }.to_string(),
        ]);
        table.add_row(row);
    }
    table.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn benchmark_rows_report_identical_parameters() {
        let rows = bench_setup(CircuitKind::Chain, &[32], 4, None).expect("bench");
        assert_eq!(rows.len(), 1);
        assert!(rows[0].identical);
        assert_eq!(rows[0].log2_domain, 5);
        let table = render_table(&rows);
        assert!(table.contains("| chain"), "{table}");
        assert!(table.contains("2^5"), "{table}");
        assert!(!table.contains("cuda"), "{table}");
    }

    #[test]
    fn a_second_engine_gets_a_column_and_joins_the_identity_check() {
        let cpu = super::super::fixed_base::CpuFixedBase;
        let rows = bench_setup(CircuitKind::Chain, &[32], 4, Some(&cpu)).expect("bench");
        assert!(rows[0].identical);
        assert!(rows[0].cuda_s.is_some());
        let table = render_table(&rows);
        assert!(table.contains("cuda (s)"), "{table}");
    }
}

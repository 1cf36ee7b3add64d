//! Who is in the experiment: the canaries and the baselines, picked from the
//! selected hosts by count or by pattern, and the rest of the selection
//! that a promotion rolls out to.

use super::raw::HostPick;
use crate::inventory::select::{self, SelectError};
use crate::inventory::{Host, ResolvedInventory};
use crate::playbook::{BatchSize, Strategy};

#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    #[error("hosts.{group}: {source}")]
    Select {
        group: &'static str,
        #[source]
        source: Box<SelectError>,
    },
    #[error("hosts.{group}: {wanted} wanted, {left} left in the selection ({hosts})")]
    TooFew {
        group: &'static str,
        wanted: usize,
        left: usize,
        hosts: String,
    },
    #[error("hosts.{group}: pattern {pattern:?} picks no host of the selection that is not already a canary")]
    Empty {
        group: &'static str,
        pattern: String,
    },
}

/// The experiment's hosts, each list in inventory order.
#[derive(Debug, Clone, PartialEq)]
pub struct Groups {
    pub canary: Vec<Host>,
    pub baseline: Vec<Host>,
    /// The selection less the canaries: where `promote` rolls out.
    pub rest: Vec<Host>,
}

fn names(inv: &ResolvedInventory, idx: &[usize]) -> String {
    idx.iter()
        .map(|&i| inv.hosts[i].host.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Picks one group from `pool` (indices into the inventory). A count takes
/// hosts the way a rollout picks its canaries (tagged `canary` first, then
/// inventory order); a pattern takes the hosts of the pool it matches.
fn pick(
    inv: &ResolvedInventory,
    pool: &[usize],
    how: &HostPick,
    group: &'static str,
) -> Result<Vec<usize>, GroupError> {
    match how {
        HostPick::Count(n) => {
            if *n > pool.len() {
                return Err(GroupError::TooFew {
                    group,
                    wanted: *n,
                    left: pool.len(),
                    hosts: names(inv, pool),
                });
            }
            let hosts: Vec<Host> = pool.iter().map(|&i| inv.hosts[i].host.clone()).collect();
            let strategy = Strategy {
                canary: *n,
                batch: BatchSize::Percent(100),
                ..Strategy::default()
            };
            let first = strategy
                .batches(&hosts)
                .into_iter()
                .next()
                .unwrap_or_default();
            let mut picked: Vec<usize> = first.into_iter().map(|k| pool[k]).collect();
            picked.sort_unstable();
            Ok(picked)
        }
        HostPick::Pattern(p) => {
            let matched = select::select(inv, Some(p)).map_err(|source| GroupError::Select {
                group,
                source: Box::new(source),
            })?;
            let picked: Vec<usize> = matched.into_iter().filter(|i| pool.contains(i)).collect();
            if picked.is_empty() {
                return Err(GroupError::Empty {
                    group,
                    pattern: p.clone(),
                });
            }
            Ok(picked)
        }
    }
}

/// Splits the selection (inventory indices, in order) into the groups.
pub fn split(
    inv: &ResolvedInventory,
    selection: &[usize],
    canary: &HostPick,
    baseline: &HostPick,
) -> Result<Groups, GroupError> {
    let canaries = pick(inv, selection, canary, "canary")?;
    let rest: Vec<usize> = selection
        .iter()
        .copied()
        .filter(|i| !canaries.contains(i))
        .collect();
    // Baselines: by count, the hosts not tagged `canary` are preferred, so
    // the rule that picks canaries is not turned on its head here.
    let baselines = match baseline {
        HostPick::Count(n) => {
            let mut order = rest.clone();
            order.sort_by_key(|&i| inv.hosts[i].host.tags.iter().any(|t| t == "canary"));
            if *n > order.len() {
                return Err(GroupError::TooFew {
                    group: "baseline",
                    wanted: *n,
                    left: order.len(),
                    hosts: names(inv, &order),
                });
            }
            let mut b = order[..*n].to_vec();
            b.sort_unstable();
            b
        }
        HostPick::Pattern(_) => pick(inv, &rest, baseline, "baseline")?,
    };
    let hosts = |idx: &[usize]| idx.iter().map(|&i| inv.hosts[i].host.clone()).collect();
    Ok(Groups {
        canary: hosts(&canaries),
        baseline: hosts(&baselines),
        rest: hosts(&rest),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv() -> ResolvedInventory {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inv.yaml");
        let h = |name: &str, tags: &str| {
            format!("  {name}: {{ transport: local, install_dir: /tmp/{name}, tags: [{tags}] }}\n")
        };
        let text = format!(
            "hosts:\n{}{}{}{}{}groups:\n  east:\n    hosts: [h04, h05]\n",
            h("h01", ""),
            h("h02", ""),
            h("h03", "canary"),
            h("h04", ""),
            h("h05", "")
        );
        std::fs::write(&path, text).unwrap();
        crate::inventory::load(Some(&path), &[]).unwrap()
    }

    fn of(hosts: &[Host]) -> Vec<&str> {
        hosts.iter().map(|h| h.name.as_str()).collect()
    }

    #[test]
    fn counts_take_tagged_canaries_first_and_baselines_from_the_rest() {
        let inv = inv();
        let all: Vec<usize> = (0..5).collect();
        let g = split(&inv, &all, &HostPick::Count(2), &HostPick::Count(2)).unwrap();
        assert_eq!(of(&g.canary), ["h01", "h03"]);
        assert_eq!(of(&g.baseline), ["h02", "h04"]);
        assert_eq!(of(&g.rest), ["h02", "h04", "h05"]);
    }

    #[test]
    fn patterns_pick_within_the_selection_and_never_overlap() {
        let inv = inv();
        let all: Vec<usize> = (0..5).collect();
        let g = split(
            &inv,
            &all,
            &HostPick::Pattern("h01".into()),
            &HostPick::Pattern("east".into()),
        )
        .unwrap();
        assert_eq!(
            (of(&g.canary), of(&g.baseline)),
            (vec!["h01"], vec!["h04", "h05"])
        );
        let e = split(
            &inv,
            &all,
            &HostPick::Pattern("h01".into()),
            &HostPick::Pattern("h01".into()),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("hosts.baseline") && e.contains("already a canary"),
            "{e}"
        );
        let e = split(&inv, &[0, 1], &HostPick::Count(1), &HostPick::Count(2))
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 wanted, 1 left"), "{e}");
        let e = split(
            &inv,
            &all,
            &HostPick::Pattern("nope".into()),
            &HostPick::Count(1),
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("hosts.canary: --limit \"nope\""), "{e}");
    }
}

//! Second pass: merge defaults, top-level vars, group vars, host entries and
//! `-e` extra vars into one [`Host`] per host, remembering which layer set
//! each variable (for `fleetctl inventory show`).
//!
//! Precedence, lowest first: built-in defaults < top-level `vars` < group
//! `vars` (parents before children, then file order) < the host entry <
//! `-e key=value`. `health` mappings merge key by key; `tags` are the union
//! of every layer's tags; every other key is replaced whole.

use super::host::{Host, TransportKind};
use super::names;
use super::raw::{RawGroup, RawInventory, KNOWN_KEYS};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use super::defaults::{default_config_path, default_user};
pub use super::defaults::{DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_PORT, DEFAULT_SSH_PERSIST_S};
pub const DEFAULT_INSTALL_DIR: &str = "/opt/prover";

/// Which layer a resolved variable came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Default,
    Vars,
    Group(String),
    Host,
    Extra,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::Vars => f.write_str("vars"),
            Origin::Group(g) => write!(f, "group {g}"),
            Origin::Host => f.write_str("host"),
            Origin::Extra => f.write_str("-e"),
        }
    }
}

/// Errors of the resolve pass, each naming the file and the group, host or
/// key concerned.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(
        "{file}: group `{group}` lists child `{child}`, which is not a group (groups: {known})"
    )]
    UnknownChild {
        file: String,
        group: String,
        child: String,
        known: String,
    },
    #[error("{file}: groups form a cycle: {cycle}")]
    GroupCycle { file: String, cycle: String },
    #[error("{file}: `{name}` is both a group and a host; names must be distinct")]
    NameClash { file: String, name: String },
    #[error("{file}: host `{host}`: `{key}` (set by {origin}) {problem}")]
    BadValue {
        file: String,
        host: String,
        key: String,
        origin: Origin,
        problem: String,
    },
    #[error("{file}: host name {problem}")]
    BadName { file: String, problem: String },
    #[error("{0}")]
    SameMachine(Box<SameMachine>),
    #[error("-e {arg}: expected KEY=VALUE")]
    ExtraVar { arg: String },
}

/// Two inventory entries that reach one machine.
#[derive(Debug)]
pub struct SameMachine {
    pub file: String,
    pub first: String,
    pub second: String,
    /// `address:port`, with the jump host when there is one.
    pub machine: String,
    /// Set when both also have the same install_dir (never allowed).
    pub install_dir: Option<String>,
}

impl fmt::Display for SameMachine {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let SameMachine {
            file,
            first,
            second,
            machine,
            install_dir,
        } = self;
        write!(
            f,
            "{file}: hosts `{first}` and `{second}` are the same machine ({machine})"
        )?;
        match install_dir {
            Some(dir) => write!(
                f,
                " with the same install_dir {dir}: one installation cannot be two hosts, even with `shared_machine`"
            ),
            None => f.write_str(
                "; two entries would take two locks and start two daemons there. Remove one, \
                 or, for two daemons on purpose (their own install_dir and port), set \
                 `shared_machine: true` on both",
            ),
        }
    }
}

/// One host with the origin of each of its variables.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub host: Host,
    /// Every merged variable (known keys included) and who set it.
    pub origins: BTreeMap<String, (Value, Vec<Origin>)>,
}

/// Where relative local paths in the inventory are resolved.
#[derive(Debug, Clone)]
pub struct Bases {
    /// Name shown in messages (the file path, or a description).
    pub file: String,
    /// Directory of the inventory file: `config_file`, `identity_file`,
    /// `known_hosts` are relative to it.
    pub inventory_dir: PathBuf,
    /// Current directory: relative `install_dir` of local hosts and relative
    /// paths given with `-e` are relative to it.
    pub cwd: PathBuf,
}

/// Parses `-e key=value` arguments; the value is read as YAML, so `gpus=4`
/// is a number and `health={max_gpu_temp_c: 80}` a mapping.
/// The known key an unknown `key` is probably a misspelling of: one edit
/// away, or a known key with a unit suffix (`connect_timeout_s`). Free
/// variables are allowed in `vars:`, so this can only warn.
pub fn near_miss(key: &str) -> Option<&'static str> {
    if KNOWN_KEYS.contains(&key) {
        return None;
    }
    let trimmed = ["_s", "_secs", "_seconds", "_ms"]
        .iter()
        .find_map(|suffix| key.strip_suffix(suffix));
    KNOWN_KEYS.iter().copied().find(|known| {
        trimmed == Some(*known) || (known.len() > 3 && edit_distance(key, known) == 1)
    })
}

fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

pub fn parse_extra_vars(args: &[String]) -> Result<Vec<(String, Value)>, ResolveError> {
    args.iter()
        .map(|arg| {
            let (k, v) = arg
                .split_once('=')
                .filter(|(k, _)| !k.trim().is_empty())
                .ok_or_else(|| ResolveError::ExtraVar { arg: arg.clone() })?;
            let value = if v.is_empty() {
                Value::from("")
            } else {
                serde_yaml::from_str::<Value>(v).unwrap_or_else(|_| Value::from(v))
            };
            Ok((k.trim().to_string(), value))
        })
        .collect()
}

/// The group graph: members (recursive), depth and file order.
struct Groups<'a> {
    order: Vec<(&'a str, &'a RawGroup)>,
}

impl<'a> Groups<'a> {
    fn new(raw: &'a RawInventory, file: &str) -> Result<Self, ResolveError> {
        let order: Vec<(&str, &RawGroup)> =
            raw.groups.iter().map(|(k, g)| (k.as_str(), g)).collect();
        let known: BTreeSet<&str> = order.iter().map(|(k, _)| *k).collect();
        for (name, g) in &order {
            for child in &g.children {
                if !known.contains(child.as_str()) {
                    return Err(ResolveError::UnknownChild {
                        file: file.to_string(),
                        group: name.to_string(),
                        child: child.clone(),
                        known: known.iter().copied().collect::<Vec<_>>().join(", "),
                    });
                }
            }
        }
        let groups = Groups { order };
        for (name, _) in &groups.order {
            groups.check_cycle(name, &mut Vec::new(), file)?;
        }
        Ok(groups)
    }

    fn get(&self, name: &str) -> Option<&'a RawGroup> {
        self.order.iter().find(|(k, _)| *k == name).map(|(_, g)| *g)
    }

    fn check_cycle(
        &self,
        name: &'a str,
        path: &mut Vec<&'a str>,
        file: &str,
    ) -> Result<(), ResolveError> {
        if let Some(at) = path.iter().position(|p| *p == name) {
            let mut cycle: Vec<&str> = path[at..].to_vec();
            cycle.push(name);
            return Err(ResolveError::GroupCycle {
                file: file.to_string(),
                cycle: cycle.join(" -> "),
            });
        }
        path.push(name);
        if let Some(g) = self.get(name) {
            for child in &g.children {
                self.check_cycle(child, path, file)?;
            }
        }
        path.pop();
        Ok(())
    }

    /// Longest chain of parents above `name` (roots are 0). Acyclic by now.
    fn depth(&self, name: &str) -> usize {
        self.order
            .iter()
            .filter(|(_, g)| g.children.iter().any(|c| c == name))
            .map(|(parent, _)| 1 + self.depth(parent))
            .max()
            .unwrap_or(0)
    }

    /// Hosts of a group, its children's included.
    fn members(&self, name: &str, out: &mut BTreeSet<String>) {
        if let Some(g) = self.get(name) {
            out.extend(g.hosts.iter().cloned());
            for child in &g.children {
                self.members(child, out);
            }
        }
    }
}

/// The resolved inventory.
#[derive(Debug, Clone)]
pub struct ResolvedInventory {
    pub file: String,
    /// Hosts in file order (entries under `hosts:` first, then hosts only
    /// named in groups, in the order groups name them).
    pub hosts: Vec<Resolved>,
    /// Group name -> member hosts (children included), in file order.
    pub groups: Vec<(String, BTreeSet<String>)>,
}

/// Merges every layer into hosts.
pub fn resolve(
    raw: &RawInventory,
    bases: &Bases,
    extra: &[(String, Value)],
) -> Result<ResolvedInventory, ResolveError> {
    let file = bases.file.as_str();
    let groups = Groups::new(raw, file)?;
    for (name, _) in &groups.order {
        if raw.hosts.get(name).is_some() {
            return Err(ResolveError::NameClash {
                file: file.to_string(),
                name: name.to_string(),
            });
        }
    }
    let mut names: Vec<String> = raw.hosts.iter().map(|(k, _)| k.clone()).collect();
    for (_, g) in &groups.order {
        for h in &g.hosts {
            if !names.contains(h) {
                names.push(h.clone());
            }
        }
    }
    let group_members: Vec<(String, BTreeSet<String>)> = groups
        .order
        .iter()
        .map(|(name, _)| {
            let mut m = BTreeSet::new();
            groups.members(name, &mut m);
            (name.to_string(), m)
        })
        .collect();

    let mut hosts = Vec::with_capacity(names.len());
    for name in &names {
        names::host_name(name).map_err(|problem| ResolveError::BadName {
            file: file.to_string(),
            problem,
        })?;
        // Groups of this host, outermost first, file order among equals.
        let mut mine: Vec<(usize, usize, &str)> = group_members
            .iter()
            .enumerate()
            .filter(|(_, (_, m))| m.contains(name))
            .map(|(i, (g, _))| (groups.depth(g), i, g.as_str()))
            .collect();
        mine.sort();
        let mut layers: Vec<(Origin, Map<String, Value>)> = vec![
            (Origin::Default, defaults(name)),
            (Origin::Vars, raw.vars.0.clone()),
        ];
        for (_, _, g) in &mine {
            if let Some(group) = groups.get(g) {
                layers.push((Origin::Group(g.to_string()), group.vars.0.clone()));
            }
        }
        if let Some(Some(entry)) = raw.hosts.get(name) {
            layers.push((Origin::Host, entry.clone().into_layer()));
        }
        layers.push((Origin::Extra, extra.iter().cloned().collect()));
        let origins = merge(&layers);
        let host = build(
            name,
            mine.iter().map(|(_, _, g)| g.to_string()).collect(),
            &origins,
            bases,
        )?;
        hosts.push(Resolved { host, origins });
    }
    check_machines(&hosts, file)?;
    Ok(ResolvedInventory {
        file: file.to_string(),
        hosts,
        groups: group_members,
    })
}

/// The machine an entry reaches: for SSH the address (case folded), port and
/// jump host; every local entry is this machine.
fn machine(h: &Host) -> String {
    match h.transport {
        TransportKind::Local => "this machine, transport local".to_string(),
        TransportKind::Ssh => {
            let mut m = format!("{}:{}", h.address.to_ascii_lowercase(), h.port);
            if let Some(j) = &h.jump_host {
                m.push_str(&format!(" via {j}"));
            }
            m
        }
    }
}

/// Two entries on one machine are refused unless both opt in with
/// `shared_machine: true`, and never with one install_dir (one lock, one pid
/// file, one daemon). Local entries are one machine by nature (tests and
/// experiments run several in their own folders), so only their install_dir
/// must differ.
fn check_machines(hosts: &[Resolved], file: &str) -> Result<(), ResolveError> {
    let shared = |r: &Resolved| {
        r.origins
            .get("shared_machine")
            .is_some_and(|(v, _)| v.as_bool() == Some(true))
    };
    for (i, a) in hosts.iter().enumerate() {
        for b in &hosts[..i] {
            let (ha, hb) = (&b.host, &a.host);
            if machine(ha) != machine(hb) {
                continue;
            }
            let install = |h: &Host| h.install_dir.trim_end_matches('/').to_string();
            if install(ha) == install(hb) {
                return Err(ResolveError::SameMachine(Box::new(SameMachine {
                    file: file.to_string(),
                    first: ha.name.clone(),
                    second: hb.name.clone(),
                    machine: machine(ha),
                    install_dir: Some(ha.install_dir.clone()),
                })));
            }
            if ha.transport == TransportKind::Ssh && !(shared(a) && shared(b)) {
                return Err(ResolveError::SameMachine(Box::new(SameMachine {
                    file: file.to_string(),
                    first: ha.name.clone(),
                    second: hb.name.clone(),
                    machine: machine(ha),
                    install_dir: None,
                })));
            }
        }
    }
    Ok(())
}

fn defaults(name: &str) -> Map<String, Value> {
    let user = default_user();
    let mut m = Map::new();
    m.insert("transport".into(), Value::from("ssh"));
    m.insert("address".into(), Value::from(name));
    m.insert("port".into(), Value::from(DEFAULT_PORT));
    m.insert("user".into(), Value::from(user));
    m.insert(
        "connect_timeout".into(),
        Value::from(DEFAULT_CONNECT_TIMEOUT_S),
    );
    m.insert("install_dir".into(), Value::from(DEFAULT_INSTALL_DIR));
    m.insert("gpus".into(), Value::from(0));
    m.insert("tags".into(), Value::Array(Vec::new()));
    m
}

/// Applies layers in order; returns each key's final value and every layer
/// that contributed to it.
fn merge(layers: &[(Origin, Map<String, Value>)]) -> BTreeMap<String, (Value, Vec<Origin>)> {
    let mut out: BTreeMap<String, (Value, Vec<Origin>)> = BTreeMap::new();
    for (origin, layer) in layers {
        for (k, v) in layer {
            match (k.as_str(), out.get_mut(k)) {
                ("health", Some((Value::Object(old), from))) if v.is_object() => {
                    if let Value::Object(new) = v {
                        deep_merge(old, new);
                    }
                    from.push(origin.clone());
                }
                ("tags", Some((Value::Array(old), from))) if v.is_array() => {
                    if let Value::Array(new) = v {
                        for t in new {
                            if !old.contains(t) {
                                old.push(t.clone());
                            }
                        }
                    }
                    from.push(origin.clone());
                }
                (_, Some((value, from))) => {
                    *value = v.clone();
                    from.push(origin.clone());
                }
                (_, None) => {
                    out.insert(k.clone(), (v.clone(), vec![origin.clone()]));
                }
            }
        }
    }
    out
}

fn deep_merge(old: &mut Map<String, Value>, new: &Map<String, Value>) {
    for (k, v) in new {
        match (old.get_mut(k), v) {
            (Some(Value::Object(o)), Value::Object(n)) => deep_merge(o, n),
            _ => {
                old.insert(k.clone(), v.clone());
            }
        }
    }
}

/// Reads the known keys out of the merged variables into a [`Host`].
fn build(
    name: &str,
    groups: Vec<String>,
    merged: &BTreeMap<String, (Value, Vec<Origin>)>,
    bases: &Bases,
) -> Result<Host, ResolveError> {
    let bad = |key: &str, problem: String| ResolveError::BadValue {
        file: bases.file.clone(),
        host: name.to_string(),
        key: key.to_string(),
        origin: merged
            .get(key)
            .and_then(|(_, o)| o.last().cloned())
            .unwrap_or(Origin::Default),
        problem,
    };
    let origin_of = |key: &str| merged.get(key).and_then(|(_, o)| o.last().cloned());
    let text = |key: &str| -> Result<Option<String>, ResolveError> {
        match merged.get(key).map(|(v, _)| v) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(other) => Err(bad(key, format!("must be a string, not {other}"))),
        }
    };
    let int = |key: &str, max: u64| -> Result<Option<u64>, ResolveError> {
        match merged.get(key).map(|(v, _)| v) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(x) if x <= max => Ok(Some(x)),
                _ => Err(bad(
                    key,
                    format!("must be an integer from 0 to {max}, not {n}"),
                )),
            },
            Some(Value::String(s)) if key == "connect_timeout" || key == "ssh_persist" => {
                humantime::parse_duration(s)
                    .map(|d| Some(d.as_secs()))
                    .map_err(|e| bad(key, format!("must be seconds or a duration like 10s: {e}")))
            }
            Some(other) => Err(bad(
                key,
                format!("must be an integer from 0 to {max}, not {other}"),
            )),
        }
    };
    // A local path: `~/` is the home directory; relative paths are relative
    // to the inventory's directory, or to the current one when given with -e.
    let local_path = |key: &str| -> Result<Option<PathBuf>, ResolveError> {
        Ok(text(key)?.map(|p| {
            let base = if origin_of(key) == Some(Origin::Extra) {
                &bases.cwd
            } else {
                &bases.inventory_dir
            };
            absolute(&p, base)
        }))
    };

    let transport = match text("transport")?.as_deref() {
        Some("ssh") | None => TransportKind::Ssh,
        Some("local") => TransportKind::Local,
        Some(other) => {
            return Err(bad(
                "transport",
                format!("must be `ssh` or `local`, not `{other}`"),
            ))
        }
    };
    let mut install_dir = text("install_dir")?.unwrap_or_else(|| DEFAULT_INSTALL_DIR.to_string());
    if transport == TransportKind::Local && !Path::new(&install_dir).is_absolute() {
        install_dir = absolute(&install_dir, &bases.cwd)
            .to_string_lossy()
            .into_owned();
    }
    let config_path = match text("config_path")? {
        Some(p) if Path::new(&p).is_absolute() => p,
        Some(p) => format!("{}/{}", install_dir.trim_end_matches('/'), p),
        None => default_config_path(&install_dir),
    };
    let tags = match merged.get("tags").map(|(v, _)| v) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|t| match t {
                Value::String(s) => Ok(s.clone()),
                other => Err(bad(
                    "tags",
                    format!("must be a list of strings, found {other}"),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(Value::String(s)) => s.split(',').map(|t| t.trim().to_string()).collect(),
        Some(other) => {
            return Err(bad(
                "tags",
                format!("must be a list of strings, not {other}"),
            ))
        }
    };
    if let Some((v, _)) = merged.get("shared_machine") {
        if !v.is_boolean() && !v.is_null() {
            return Err(bad(
                "shared_machine",
                format!("must be true or false, not {v}"),
            ));
        }
    }
    if let Some((v, _)) = merged.get("health") {
        if !v.is_object() && !v.is_null() {
            return Err(bad("health", format!("must be a mapping, not {v}")));
        }
    }
    for key in merged.keys() {
        if let Some(known) = near_miss(key) {
            tracing::warn!(
                host = %name,
                "variable `{key}` is not a setting of fleetctl and is passed on as a plain variable; did you mean `{known}`?"
            );
        }
    }
    let vars = merged
        .iter()
        .filter(|(k, _)| !KNOWN_KEYS.contains(&k.as_str()) || k.as_str() == "health")
        .map(|(k, (v, _))| (k.clone(), v.clone()))
        .collect();
    // Every value that reaches ssh or a remote script, held to its rule.
    let checked = |key: &str, value: String, rule: fn(&str) -> Result<(), names::Problem>| {
        rule(&value).map(|()| value).map_err(|p| bad(key, p))
    };
    let address = checked(
        "address",
        text("address")?.unwrap_or_else(|| name.to_string()),
        names::address,
    )?;
    let user = checked(
        "user",
        text("user")?.unwrap_or_else(default_user),
        names::user,
    )?;
    let jump_host = match text("jump_host")? {
        Some(j) => Some(checked("jump_host", j, names::jump_host)?),
        None => None,
    };
    let install_dir = checked("install_dir", install_dir, names::remote_dir)?;
    let config_path = checked("config_path", config_path, names::remote_dir)?;
    Ok(Host {
        name: name.to_string(),
        transport,
        address,
        port: int("port", u16::MAX as u64)?.map_or(DEFAULT_PORT, |p| p as u16),
        user,
        identity_file: local_path("identity_file")?,
        jump_host,
        known_hosts: local_path("known_hosts")?,
        connect_timeout_s: int("connect_timeout", u32::MAX as u64)?
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT_S),
        ssh_persist_s: int("ssh_persist", u32::MAX as u64)?.unwrap_or(DEFAULT_SSH_PERSIST_S),
        install_dir,
        config_path,
        config_file: local_path("config_file")?,
        gpus: int("gpus", u32::MAX as u64)?.map_or(0, |g| g as u32),
        tags,
        groups,
        vars,
    })
}

fn absolute(p: &str, base: &Path) -> PathBuf {
    if let Some(rest) = p.strip_prefix("~/") {
        if let Some(home) = std::env::var_os("HOME") {
            return PathBuf::from(home).join(rest);
        }
    }
    let path = Path::new(p);
    if path.is_absolute() {
        path.to_owned()
    } else {
        base.join(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::raw;

    fn bases() -> Bases {
        Bases {
            file: "inv.yaml".into(),
            inventory_dir: PathBuf::from("/etc/fleet"),
            cwd: PathBuf::from("/home/op/repo"),
        }
    }

    fn inv(text: &str, extra: &[&str]) -> Result<ResolvedInventory, ResolveError> {
        let raw = raw::parse(Path::new("inv.yaml"), text).unwrap();
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        resolve(&raw, &bases(), &parse_extra_vars(&extra)?)
    }

    fn host<'a>(inv: &'a ResolvedInventory, name: &str) -> &'a Resolved {
        inv.hosts.iter().find(|h| h.host.name == name).unwrap()
    }

    const LAYERED: &str = "
vars: { user: top, install_dir: /data/prover, gpus: 1, log: top, health: { max_gpu_temp_c: 90, min_free_mem: 1GiB } }
groups:
  gpu:
    vars: { gpus: 8, log: gpu, user: gpu-user, health: { max_gpu_temp_c: 83 } }
    hosts: [gpu-01]
    children: [canary]
  canary:
    vars: { log: canary }
    hosts: [gpu-02]
  rack-b:
    vars: { log: rack-b, port: 2222 }
    hosts: [gpu-02]
hosts:
  gpu-01: { address: 10.0.0.11, tags: [a] }
  gpu-02: { address: 10.0.0.12, user: ops, vars: { log: host-vars } }
  gpu-03: { transport: local, install_dir: .deploy/x, config_file: files/p.toml }
";

    #[test]
    fn near_misses_of_known_keys_are_caught_free_variables_are_not() {
        assert_eq!(near_miss("connect_timeout_s"), Some("connect_timeout"));
        assert_eq!(near_miss("instal_dir"), Some("install_dir"));
        assert_eq!(near_miss("ssh_persist_s"), Some("ssh_persist"));
        assert_eq!(near_miss("connect_timeout"), None);
        assert_eq!(near_miss("log"), None);
        assert_eq!(near_miss("ssh_kex_algorithms"), None);
    }

    #[test]
    fn precedence_defaults_vars_groups_host_extra() {
        let inv = inv(LAYERED, &["gpus=4"]).unwrap();
        let g1 = host(&inv, "gpu-01");
        assert_eq!(g1.host.user, "gpu-user", "group vars beat top-level vars");
        assert_eq!(g1.host.gpus, 4, "-e beats everything");
        assert_eq!(g1.host.port, DEFAULT_PORT);
        assert_eq!(g1.host.install_dir, "/data/prover");
        assert_eq!(g1.host.config_path, "/data/prover/current/prover.toml");
        assert_eq!(g1.host.vars["log"], Value::from("gpu"));
        assert_eq!(g1.host.groups, vec!["gpu"]);
        let g2 = host(&inv, "gpu-02");
        // gpu (depth 0) < rack-b (depth 0, later in file) < canary (depth 1, child of gpu)
        assert_eq!(g2.host.groups, vec!["gpu", "rack-b", "canary"]);
        assert_eq!(g2.host.port, 2222);
        assert_eq!(g2.host.user, "ops", "host entry beats group vars");
        assert_eq!(g2.host.vars["log"], Value::from("host-vars"));
        assert_eq!(
            g2.origins["log"].1,
            vec![
                Origin::Vars,
                Origin::Group("gpu".into()),
                Origin::Group("rack-b".into()),
                Origin::Group("canary".into()),
                Origin::Host
            ]
        );
        // health merges key by key
        assert_eq!(g2.host.vars["health"]["max_gpu_temp_c"], Value::from(83));
        assert_eq!(g2.host.vars["health"]["min_free_mem"], Value::from("1GiB"));
    }

    #[test]
    fn defaults_and_local_paths() {
        let inv = inv(LAYERED, &["connect_timeout=30s"]).unwrap();
        let g3 = &host(&inv, "gpu-03").host;
        assert_eq!(g3.transport, TransportKind::Local);
        assert_eq!(g3.install_dir, "/home/op/repo/.deploy/x");
        assert_eq!(
            g3.config_file,
            Some(PathBuf::from("/etc/fleet/files/p.toml"))
        );
        assert_eq!(g3.address, "gpu-03");
        assert_eq!(g3.connect_timeout_s, 30);
        assert!(g3.groups.is_empty());
    }

    #[test]
    fn extra_var_of_the_wrong_type_names_host_key_and_origin() {
        let e = inv(LAYERED, &["port=http"]).unwrap_err().to_string();
        assert!(e.contains("host `gpu-01`: `port` (set by -e)"), "{e}");
        assert!(inv(LAYERED, &["noequals"])
            .unwrap_err()
            .to_string()
            .contains("KEY=VALUE"));
    }

    #[test]
    fn group_errors() {
        let e = inv("groups:\n  a: { children: [b] }\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("child `b`, which is not a group"), "{e}");
        let e = inv(
            "groups:\n  a: { children: [b] }\n  b: { children: [a] }\n",
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("cycle: a -> b -> a"), "{e}");
        let e = inv("groups:\n  a: { hosts: [a] }\nhosts:\n  a: {}\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("both a group and a host"), "{e}");
    }

    #[test]
    fn hosts_named_only_in_groups_exist_and_tags_union() {
        let inv = inv(
            "vars: { tags: [fleet] }\ngroups:\n  g: { hosts: [x], vars: { tags: [g] } }\nhosts:\n  y: {}\n",
            &[],
        )
        .unwrap();
        let names: Vec<&str> = inv.hosts.iter().map(|h| h.host.name.as_str()).collect();
        assert_eq!(names, vec!["y", "x"]);
        assert_eq!(host(&inv, "x").host.tags, vec!["fleet", "g"]);
    }

    #[test]
    fn two_entries_on_one_machine_are_refused_naming_both_unless_both_opt_in() {
        let e = inv(
            "hosts:\n  a: { address: 10.0.0.5 }\n  b: { address: 10.0.0.6 }\n  c: { address: 10.0.0.5, install_dir: /srv/p2 }\n",
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("`a` and `c` are the same machine (10.0.0.5:22)"),
            "{e}"
        );
        assert!(e.contains("shared_machine: true"), "{e}");
        // Another port or jump host is another machine (NAT, bastions).
        inv(
            "hosts:\n  a: { address: 10.0.0.5 }\n  b: { address: 10.0.0.5, port: 2222 }\n  c: { address: 10.0.0.5, jump_host: j2 }\n",
            &[],
        )
        .unwrap();
        // Case of a DNS name does not make another machine.
        assert!(inv(
            "hosts:\n  a: { address: Gpu1 }\n  b: { address: gpu1, install_dir: /x }\n",
            &[]
        )
        .is_err());
        // Opt-in on one side only is not enough; on both, with two install_dirs, it is.
        assert!(inv("vars: { address: 10.0.0.5 }\nhosts:\n  a: { shared_machine: true }\n  b: { install_dir: /srv/p2 }\n", &[]).is_err());
        let ok = inv(
            "vars: { address: 10.0.0.5, shared_machine: true }\nhosts:\n  a: {}\n  b: { install_dir: /srv/p2 }\n",
            &[],
        )
        .unwrap();
        assert!(!ok.hosts[0].host.vars.contains_key("shared_machine"));
        // One install_dir is never two hosts, opt-in or not, local or ssh.
        let e = inv(
            "vars: { address: 10.0.0.5, shared_machine: true }\nhosts:\n  a: {}\n  b: {}\n",
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("same install_dir /opt/prover"), "{e}");
        assert!(inv("hosts:\n  a: { transport: local, install_dir: /x/ }\n  b: { transport: local, install_dir: /x }\n", &[]).is_err());
        inv("hosts:\n  a: { transport: local, install_dir: /x }\n  b: { transport: local, install_dir: /y }\n", &[]).unwrap();
        // -e address= on every host makes them one machine.
        assert!(inv("hosts:\n  a: {}\n  b: {}\n", &["address=10.1.1.1"]).is_err());
    }

    #[test]
    fn values_that_reach_ssh_or_a_remote_script_are_refused_naming_host_and_key() {
        let err = |text: &str, extra: &[&str]| inv(text, extra).unwrap_err().to_string();
        assert_eq!(
            err("hosts:\n  gpu-01: { address: -oProxyCommand=sh }\n", &[]),
            "inv.yaml: host `gpu-01`: `address` (set by host) \"-oProxyCommand=sh\" must not \
             start with `-` (ssh would read it as an option)"
        );
        assert_eq!(
            err("vars: { user: \"-oX\" }\nhosts:\n  a: {}\n", &[]),
            "inv.yaml: host `a`: `user` (set by vars) \"-oX\" must not start with `-` or `.`"
        );
        assert_eq!(
            err("hosts:\n  a: { jump_host: \"ops@bastion:70000\" }\n", &[]),
            "inv.yaml: host `a`: `jump_host` (set by host) \"ops@bastion:70000\": port \
             \"70000\" must be a number from 1 to 65535"
        );
        assert_eq!(
            err("hosts:\n  a: {}\n", &["install_dir=/opt/p;reboot"]),
            "inv.yaml: host `a`: `install_dir` (set by -e) \"/opt/p;reboot\" has ';'; a remote \
             path may not hold any of ;$`'\"\\|&<>()*?[]{}!"
        );
        assert_eq!(
            err("groups:\n  g: { vars: { install_dir: opt/prover } }\n  h: { hosts: [a] }\nhosts:\n  a: {}\n  b: {}\n", &["install_dir=prover"]),
            "inv.yaml: host `a`: `install_dir` (set by -e) \"prover\" must be an absolute path"
        );
        assert_eq!(
            err("hosts:\n  a: { install_dir: /data/../etc }\n", &[]),
            "inv.yaml: host `a`: `install_dir` (set by host) \"/data/../etc\" must not contain `..`"
        );
        assert_eq!(
            err("hosts:\n  a: { config_path: \"/etc/p$x.toml\" }\n", &[]),
            "inv.yaml: host `a`: `config_path` (set by host) \"/etc/p$x.toml\" has '$'; a \
             remote path may not hold any of ;$`'\"\\|&<>()*?[]{}!"
        );
        // A name only a group lists is held to the rule too.
        assert_eq!(
            err("groups:\n  g: { hosts: [\"-h1\"] }\n", &[]),
            "inv.yaml: host name \"-h1\" must not start with `-` or `.`"
        );
        assert_eq!(
            err("hosts:\n  \"../up\": {}\n", &[]),
            "inv.yaml: host name \"../up\" has '/'; a host name is letters, digits, `-`, `_` \
             and `.`"
        );
        // A local host's relative install_dir is checked once made absolute.
        let ok = inv(
            "hosts:\n  a: { transport: local, install_dir: .deploy/a }\n",
            &[],
        )
        .unwrap();
        assert_eq!(ok.hosts[0].host.install_dir, "/home/op/repo/.deploy/a");
        assert!(inv(
            "hosts:\n  a: { transport: local, install_dir: \"x;y\" }\n",
            &[]
        )
        .is_err());
    }

    #[test]
    fn host_local_is_what_a_local_inventory_entry_resolves_to() {
        let inv = inv(
            "hosts:\n  box: { transport: local, install_dir: /srv/prover/ }\n",
            &[],
        )
        .unwrap();
        assert_eq!(host(&inv, "box").host, Host::local("box", "/srv/prover/"));
    }
}

//! Inventories: hosts, groups and variables, read raw then resolved.
//!
//! [`raw`] deserialises and type-checks (errors carry file:line:column),
//! [`resolve`] merges layers into [`Host`]s and holds each to the rules of
//! [`names`], [`select`] applies `--limit`.
//! The precedence is documented in `docs/inventory.md` and in [`resolve`].

mod defaults;
mod host;
pub mod names;
pub mod raw;
pub mod resolve;
pub mod retry;
pub mod select;
pub mod yaml;

pub use host::{Host, TransportKind};
pub use resolve::{Origin, Resolved, ResolvedInventory};

use std::path::{Path, PathBuf};

/// Which inventory to load and which of its hosts to act on: what every
/// command that touches hosts is given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    /// Inventory file; `None` is the built-in local inventory.
    pub inventory: Option<PathBuf>,
    /// `--limit` pattern: names, groups, `tag:NAME`, globs or `@FILE`,
    /// separated by `,` or `:` ([`select`]).
    pub limit: Option<String>,
    /// `key=value` variables with the highest precedence.
    pub extra_vars: Vec<String>,
}

/// The built-in inventory used when no `-i` is given: this machine, no SSH.
pub const BUILTIN_LOCAL: &str = include_str!("../../../inventories/local.yaml");
/// The prover config the built-in inventory ships.
pub const BUILTIN_LOCAL_CONFIG: &str = include_str!("../../../inventories/files/prover-local.toml");
/// Where the built-in inventory's `config_file` points, relative to its directory.
const BUILTIN_CONFIG_REL: &str = "files/prover-local.toml";

/// Any failure to load or select from an inventory.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error(transparent)]
    Raw(#[from] raw::RawError),
    #[error(transparent)]
    Resolve(#[from] resolve::ResolveError),
    #[error(transparent)]
    Select(#[from] select::SelectError),
    #[error("cannot determine the current directory: {0}")]
    Cwd(#[source] std::io::Error),
    #[error("cannot write the built-in local config to {}: {source}", path.display())]
    Builtin {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: no host named `{name}` (hosts: {hosts})")]
    UnknownHost {
        file: String,
        name: String,
        hosts: String,
    },
}

/// Loads and resolves an inventory: `path`, or the built-in local one.
pub fn load(
    path: Option<&Path>,
    extra_vars: &[String],
) -> Result<ResolvedInventory, InventoryError> {
    let extra = resolve::parse_extra_vars(extra_vars)?;
    let cwd = std::env::current_dir().map_err(InventoryError::Cwd)?;
    match path {
        Some(path) => {
            let raw = raw::read(path)?;
            let dir = path.parent().map(Path::to_owned).unwrap_or_default();
            let bases = resolve::Bases {
                file: path.display().to_string(),
                inventory_dir: if dir.as_os_str().is_empty() {
                    cwd.clone()
                } else {
                    cwd.join(dir)
                },
                cwd,
            };
            Ok(resolve::resolve(&raw, &bases, &extra)?)
        }
        None => {
            let name = Path::new("inventories/local.yaml (built in)");
            let raw = raw::parse(name, BUILTIN_LOCAL)?;
            let bases = resolve::Bases {
                file: name.display().to_string(),
                inventory_dir: builtin_dir(&cwd)?,
                cwd,
            };
            Ok(resolve::resolve(&raw, &bases, &extra)?)
        }
    }
}

/// The directory the built-in inventory behaves as if it lived in: the
/// checkout's `inventories/` when run from the repository root, otherwise
/// `.fleetctl/inventories/` with the built-in config written into it.
fn builtin_dir(cwd: &Path) -> Result<PathBuf, InventoryError> {
    let in_repo = cwd.join("inventories");
    if in_repo.join(BUILTIN_CONFIG_REL).is_file() {
        return Ok(in_repo);
    }
    let dir = cwd.join(".fleetctl/inventories");
    let file = dir.join(BUILTIN_CONFIG_REL);
    let write = || -> std::io::Result<()> {
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&file, BUILTIN_LOCAL_CONFIG)
    };
    write().map_err(|source| InventoryError::Builtin {
        path: file.clone(),
        source,
    })?;
    Ok(dir)
}

/// Loads the inventory named by `target` and applies its `--limit`.
pub fn load_selected(target: &Target) -> Result<(ResolvedInventory, Vec<Host>), InventoryError> {
    let inv = load(target.inventory.as_deref(), &target.extra_vars)?;
    let picked = select::select(&inv, target.limit.as_deref())?;
    let hosts = picked.iter().map(|&i| inv.hosts[i].host.clone()).collect();
    Ok((inv, hosts))
}

/// Finds one host of a loaded inventory by name (`fleetctl inventory show`).
pub fn find<'a>(inv: &'a ResolvedInventory, name: &str) -> Result<&'a Resolved, InventoryError> {
    inv.hosts
        .iter()
        .find(|h| h.host.name == name)
        .ok_or_else(|| InventoryError::UnknownHost {
            file: inv.file.clone(),
            name: name.to_owned(),
            hosts: inv
                .hosts
                .iter()
                .map(|h| h.host.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// One line per host: name, transport, address, groups, tags.
pub fn render_list(inv: &ResolvedInventory, hosts: &[Host]) -> String {
    let mut out = format!(
        "# {} ({} of {} hosts)\n",
        inv.file,
        hosts.len(),
        inv.hosts.len()
    );
    let width = hosts.iter().map(|h| h.name.len()).max().unwrap_or(4).max(4);
    for h in hosts {
        let target = match h.transport {
            TransportKind::Local => "local".to_string(),
            TransportKind::Ssh => format!("ssh {}@{}:{}", h.user, h.address, h.port),
        };
        out.push_str(&format!(
            "{:width$}  {:32}  groups=[{}]  tags=[{}]\n",
            h.name,
            target,
            h.groups.join(","),
            h.tags.join(","),
        ));
    }
    out
}

/// Every variable of one host, with the layers that set it (last wins).
pub fn render_show(r: &Resolved) -> String {
    let h = &r.host;
    let mut out = format!("host {}\n", h.name);
    out.push_str(&format!(
        "  groups (outermost first): [{}]\n  resolved: transport={} address={} port={} user={} install_dir={} config_path={}\n",
        h.groups.join(", "),
        match h.transport {
            TransportKind::Ssh => "ssh",
            TransportKind::Local => "local",
        },
        h.address,
        h.port,
        h.user,
        h.install_dir,
        h.config_path
    ));
    if let Some(f) = &h.config_file {
        out.push_str(&format!("  config_file (local): {}\n", f.display()));
    }
    out.push_str("  variables (value  <- layers that set it, last wins):\n");
    let width = r.origins.keys().map(String::len).max().unwrap_or(0);
    for (k, (v, from)) in &r.origins {
        let from: Vec<String> = from.iter().map(ToString::to_string).collect();
        out.push_str(&format!("    {k:width$} = {v}  <- {}\n", from.join(" < ")));
    }
    out
}

//! First pass over an inventory file: deserialise and type-check every known
//! key, reject unknown ones, and say file:line:column and the expected form.
//! Nothing is merged or defaulted here (that is [`super::resolve`]).

use super::host::TransportKind;
use super::yaml::{self, OrderedMap, YamlFileError};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::fmt;
use std::path::{Path, PathBuf};

/// The shape of an inventory, shown under every parse error.
pub const EXPECTED_FORM: &str = "\
vars: { KEY: VALUE, ... }            # all hosts, lowest precedence
groups:
  GROUP:
    vars: { KEY: VALUE, ... }
    hosts: [HOST, ...]
    children: [GROUP, ...]
hosts:
  HOST: { address: ADDR, port: 22, user: USER, transport: ssh|local, tags: [TAG], vars: {...} }
known keys: transport (ssh|local), address, port (0-65535), user, identity_file,
  jump_host, known_hosts, connect_timeout (seconds or 10s), ssh_persist
  (seconds or 2m, 0 = off), install_dir,
  config_path, config_file, gpus (integer), tags (list), health (mapping), vars (mapping)";

/// The keys fleetctl itself understands; any other key in a `vars:` block is
/// a free-form variable.
pub const KNOWN_KEYS: &[&str] = &[
    "transport",
    "address",
    "port",
    "user",
    "identity_file",
    "jump_host",
    "known_hosts",
    "connect_timeout",
    "ssh_persist",
    "install_dir",
    "config_path",
    "config_file",
    "gpus",
    "tags",
    "health",
    "shared_machine",
];

/// A whole inventory file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInventory {
    #[serde(default)]
    pub vars: RawVars,
    #[serde(default)]
    pub groups: OrderedMap<RawGroup>,
    #[serde(default)]
    pub hosts: OrderedMap<Option<RawHost>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGroup {
    #[serde(default)]
    pub vars: RawVars,
    #[serde(default)]
    pub hosts: Vec<String>,
    #[serde(default)]
    pub children: Vec<String>,
}

/// One host entry: the known keys and a free-form `vars` mapping; anything
/// else is a typo and refused.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHost {
    pub transport: Option<TransportKind>,
    pub address: Option<String>,
    pub port: Option<u16>,
    pub user: Option<String>,
    pub identity_file: Option<PathBuf>,
    pub jump_host: Option<String>,
    pub known_hosts: Option<PathBuf>,
    pub connect_timeout: Option<Seconds>,
    pub ssh_persist: Option<Seconds>,
    pub install_dir: Option<String>,
    pub config_path: Option<String>,
    pub config_file: Option<PathBuf>,
    pub gpus: Option<u32>,
    pub tags: Option<Vec<String>>,
    pub health: Option<Map<String, Value>>,
    pub shared_machine: Option<bool>,
    pub vars: Option<RawVars>,
}

impl RawHost {
    /// The entry as one layer of variables (free-form `vars` first, so the
    /// known keys written directly on the host win over the same key in it).
    pub fn into_layer(self) -> Map<String, Value> {
        let mut out = self.vars.map(|v| v.0).unwrap_or_default();
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                out.insert(k.to_string(), v);
            }
        };
        put("transport", self.transport.map(transport_value));
        put("address", self.address.map(Value::from));
        put("port", self.port.map(Value::from));
        put("user", self.user.map(Value::from));
        put("identity_file", self.identity_file.map(path_value));
        put("jump_host", self.jump_host.map(Value::from));
        put("known_hosts", self.known_hosts.map(path_value));
        put(
            "connect_timeout",
            self.connect_timeout.map(|s| Value::from(s.0)),
        );
        put("ssh_persist", self.ssh_persist.map(|s| Value::from(s.0)));
        put("install_dir", self.install_dir.map(Value::from));
        put("config_path", self.config_path.map(Value::from));
        put("config_file", self.config_file.map(path_value));
        put("gpus", self.gpus.map(Value::from));
        put("tags", self.tags.map(Value::from));
        put("health", self.health.map(Value::Object));
        put("shared_machine", self.shared_machine.map(Value::from));
        out
    }
}

fn transport_value(t: TransportKind) -> Value {
    Value::from(match t {
        TransportKind::Ssh => "ssh",
        TransportKind::Local => "local",
    })
}

fn path_value(p: PathBuf) -> Value {
    Value::from(p.to_string_lossy().into_owned())
}

/// Whole seconds, written as an integer or a humantime string (`10s`, `1m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seconds(pub u64);

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(Seconds(n)),
            Raw::Text(t) => humantime::parse_duration(&t)
                .map(|d| Seconds(d.as_secs()))
                .map_err(|e| {
                    de::Error::custom(format!(
                        "invalid duration {t:?}: {e} (write seconds, or e.g. 10s, 1m)"
                    ))
                }),
        }
    }
}

/// A `vars:` block: known keys are type-checked where they are written (so a
/// wrong type is reported at its line), other keys are kept as they are.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawVars(pub Map<String, Value>);

impl<'de> Deserialize<'de> for RawVars {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawVars;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping of variables")
            }
            fn visit_unit<E: de::Error>(self) -> Result<RawVars, E> {
                Ok(RawVars::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawVars, A::Error> {
                let mut out = Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    if out.contains_key(&key) {
                        return Err(de::Error::custom(format!("duplicate key `{key}`")));
                    }
                    let value = known_value(&key, &mut map)?;
                    out.insert(key, value);
                }
                Ok(RawVars(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Reads the value of `key`, type-checked when it is a known key.
fn known_value<'de, A: MapAccess<'de>>(key: &str, map: &mut A) -> Result<Value, A::Error> {
    Ok(match key {
        "transport" => transport_value(map.next_value::<TransportKind>()?),
        "port" => Value::from(map.next_value::<u16>()?),
        "gpus" => Value::from(map.next_value::<u32>()?),
        "connect_timeout" | "ssh_persist" => Value::from(map.next_value::<Seconds>()?.0),
        "tags" => Value::from(map.next_value::<Vec<String>>()?),
        "health" => Value::Object(map.next_value::<Map<String, Value>>()?),
        "address" | "user" | "jump_host" | "install_dir" | "config_path" | "identity_file"
        | "known_hosts" | "config_file" => Value::from(map.next_value::<String>()?),
        "vars" => {
            return Err(de::Error::custom(
                "`vars` cannot be nested in a vars block; write the variables directly",
            ))
        }
        _ => map.next_value::<Value>()?,
    })
}

/// A read or parse error of an inventory file.
pub type RawError = YamlFileError;

/// Parses inventory text; `path` is only used in messages.
pub fn parse(path: &Path, text: &str) -> Result<RawInventory, RawError> {
    if text.trim().is_empty() {
        return Ok(RawInventory::default());
    }
    yaml::parse(path, text, EXPECTED_FORM)
}

/// Reads and parses an inventory file.
pub fn read(path: &Path) -> Result<RawInventory, RawError> {
    parse(path, &yaml::read_text("inventory", path)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(Path::new("inv.yaml"), text).unwrap_err().to_string()
    }

    #[test]
    fn unknown_host_key_is_reported_at_its_line_with_the_expected_form() {
        let e = err("hosts:\n  gpu-01:\n    adress: 10.0.0.1\n");
        assert!(e.starts_with("inv.yaml:3:5: "), "{e}");
        assert!(e.contains("unknown field `adress`"), "{e}");
        assert!(e.contains("expected form:"), "{e}");
        assert!(e.contains("known keys: transport"), "{e}");
    }

    #[test]
    fn wrong_type_in_group_vars_is_reported_at_the_value() {
        let e = err("groups:\n  gpu:\n    vars:\n      gpus: eight\n");
        assert!(e.starts_with("inv.yaml:4:13: "), "{e}");
        assert!(e.contains("gpus"), "{e}");
    }

    #[test]
    fn unknown_top_level_key_and_bad_port() {
        let e = err("host:\n  a: {}\n");
        assert!(e.starts_with("inv.yaml:1:1: "), "{e}");
        assert!(e.contains("unknown field `host`"), "{e}");
        let e = err("hosts:\n  a: { port: 70000 }\n");
        assert!(e.starts_with("inv.yaml:2:14: "), "{e}");
    }

    #[test]
    fn duplicate_host_is_refused() {
        let e = err("hosts:\n  a: {}\n  a: {}\n");
        assert!(e.contains("duplicate"), "{e}");
    }

    #[test]
    fn free_form_vars_are_kept_and_durations_parsed() {
        let inv = parse(
            Path::new("i.yaml"),
            "vars: { connect_timeout: 1m, log_level: debug }\nhosts:\n  a:\n  b: { vars: { x: 1 } }\n",
        )
        .unwrap();
        assert_eq!(inv.vars.0["connect_timeout"], Value::from(60));
        assert_eq!(inv.vars.0["log_level"], Value::from("debug"));
        assert_eq!(inv.hosts.len(), 2);
        assert!(inv.hosts.get("a").unwrap().is_none());
    }
}

//! What an inventory may give as a host's name, address, login user, jump
//! host and install directory: the one definition of each rule, used by the
//! resolver for every inventory read (a file, the built-in one, `-e`).
//!
//! Each of these reaches a command line or a shell: the address, user and
//! jump host are ssh arguments (a leading `-` would be read as an option,
//! `-oProxyCommand=...` runs a command), the install directory is part of
//! every remote script, the name is a folder of the local timing store.
//! Quoting covers the shell; these rules also keep the values what they
//! claim to be, so a hostile or mistyped inventory is refused when read
//! rather than half-working on some hosts.

use crate::persist::{bad_start, name_char};
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Component, Path};

/// Longest host name or address: a DNS name's limit.
pub const MAX_NAME: usize = 253;
/// Longest DNS label.
const MAX_LABEL: usize = 63;
/// Longest login name (Linux `useradd`'s limit).
pub const MAX_USER: usize = 32;
/// Longest remote path (`install_dir`, `config_path`): `PATH_MAX` less room
/// for what goes under it.
pub const MAX_PATH: usize = 1024;
/// Characters a shell gives a meaning to, refused in remote paths.
const SHELL_META: &[char] = &[
    ';', '$', '`', '\'', '"', '\\', '|', '&', '<', '>', '(', ')', '*', '?', '[', ']', '{', '}', '!',
];

/// Why a value broke its rule; the resolver adds host and field.
pub type Problem = String;

/// `text` for a message: quoted, control characters escaped, cut short.
fn shown(text: &str) -> String {
    let cut: String = text.chars().take(80).collect();
    let more = if cut.len() < text.len() { "..." } else { "" };
    format!("{:?}{more}", cut)
}

/// A host's inventory name: letters, digits, `-`, `_`, `.`, at most
/// [`MAX_NAME`] long, not starting with `-` or `.` (it names a folder of
/// the timing store, where `..` would be the folder above).
pub fn host_name(name: &str) -> Result<(), Problem> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!(
            "{} must be 1 to {MAX_NAME} characters long",
            shown(name)
        ));
    }
    if let Some(c) = name.chars().find(|&c| !name_char(c)) {
        return Err(format!(
            "{} has {c:?}; a host name is letters, digits, `-`, `_` and `.`",
            shown(name)
        ));
    }
    if bad_start(name) {
        return Err(format!("{} must not start with `-` or `.`", shown(name)));
    }
    Ok(())
}

/// An address ssh is given: an IPv4 or IPv6 address, or a DNS name
/// (labels of letters, digits, `-`, `_`, none empty or starting with `-`).
pub fn address(addr: &str) -> Result<(), Problem> {
    if addr.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    if addr.is_empty() || addr.len() > MAX_NAME {
        return Err(format!(
            "{} must be an IP address or a DNS name of 1 to {MAX_NAME} characters",
            shown(addr)
        ));
    }
    if addr.starts_with('-') {
        return Err(format!(
            "{} must not start with `-` (ssh would read it as an option)",
            shown(addr)
        ));
    }
    // A trailing dot is DNS's fully qualified form.
    let labels = addr.strip_suffix('.').unwrap_or(addr);
    for label in labels.split('.') {
        let ok_chars = label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'));
        if label.is_empty() || label.len() > MAX_LABEL || !ok_chars || label.starts_with('-') {
            return Err(format!(
                "{} is neither an IP address nor a DNS name (labels of letters, digits, \
                 `-` and `_`, 1 to {MAX_LABEL} long, not starting with `-`)",
                shown(addr)
            ));
        }
    }
    Ok(())
}

/// A login name from POSIX's portable set (letters, digits, `_`, `.`,
/// `-`), not starting with `-` (an ssh option) or `.`, at most
/// [`MAX_USER`] long. No `@`: `user@host` is ssh's own syntax.
pub fn user(user: &str) -> Result<(), Problem> {
    if user.is_empty() || user.len() > MAX_USER {
        return Err(format!(
            "{} must be 1 to {MAX_USER} characters long",
            shown(user)
        ));
    }
    if bad_start(user) {
        return Err(format!("{} must not start with `-` or `.`", shown(user)));
    }
    if let Some(c) = user.chars().find(|&c| !name_char(c)) {
        return Err(format!(
            "{} has {c:?}; a user name is letters, digits, `_`, `.` and `-`",
            shown(user)
        ));
    }
    Ok(())
}

/// A TCP port given as text: 1 to 65535.
fn port(text: &str, whole: &str) -> Result<u16, Problem> {
    // At most five digits, so the parse below cannot overflow.
    let n = (!text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse::<u32>().ok())
        .flatten()
        .filter(|p| (1..=65535).contains(p));
    n.map(|p| p as u16).ok_or_else(|| {
        format!(
            "{}: port {} must be a number from 1 to 65535",
            shown(whole),
            shown(text)
        )
    })
}

/// A jump host (`ProxyJump`): `[USER@]HOST[:PORT]`, HOST an [`address`]
/// (an IPv6 one in brackets when a port follows), PORT 1 to 65535. One hop:
/// a list would be one more way to hand ssh a value of our choosing.
pub fn jump_host(jump: &str) -> Result<(), Problem> {
    let (login, rest) = match jump.split_once('@') {
        Some((u, rest)) => (Some(u), rest),
        None => (None, jump),
    };
    if let Some(u) = login {
        user(u).map_err(|p| format!("{}: user {p}", shown(jump)))?;
    }
    if let Some(inner) = rest.strip_prefix('[') {
        let (ip, after) = inner
            .split_once(']')
            .ok_or_else(|| format!("{}: `[` without its `]`", shown(jump)))?;
        ip.parse::<Ipv6Addr>()
            .map_err(|_| format!("{}: {} is not an IPv6 address", shown(jump), shown(ip)))?;
        return match after {
            "" => Ok(()),
            _ => match after.strip_prefix(':') {
                Some(p) => port(p, jump).map(drop),
                None => Err(format!(
                    "{}: only `:PORT` may follow `]`, not {}",
                    shown(jump),
                    shown(after)
                )),
            },
        };
    }
    // One colon: HOST:PORT. More: a bare IPv6 address, which takes no port.
    let host = match rest.matches(':').count() {
        1 => {
            let (host, p) = rest.split_once(':').unwrap_or((rest, ""));
            port(p, jump)?;
            host
        }
        _ => rest,
    };
    address(host).map_err(|p| format!("{}: host {p}", shown(jump)))
}

/// A directory on the host that fleetctl's remote scripts work in: an
/// absolute path with no `..` (no way above what the inventory names), no
/// control character and no shell metacharacter. Quoting already keeps a
/// shell from reading them; refusing them as well means a value from a
/// hostile inventory never depends on that quoting being right everywhere.
pub fn remote_dir(dir: &str) -> Result<(), Problem> {
    if !dir.starts_with('/') {
        return Err(format!("{} must be an absolute path", shown(dir)));
    }
    if dir.len() > MAX_PATH {
        return Err(format!("{} is longer than {MAX_PATH} bytes", shown(dir)));
    }
    if let Some(c) = dir.chars().find(|c| c.is_control()) {
        return Err(format!("{} has the control character {c:?}", shown(dir)));
    }
    if let Some(c) = dir.chars().find(|c| SHELL_META.contains(c)) {
        return Err(format!(
            "{} has {c:?}; a remote path may not hold any of {}",
            shown(dir),
            SHELL_META.iter().collect::<String>()
        ));
    }
    if Path::new(dir)
        .components()
        .any(|c| matches!(c, Component::ParentDir))
    {
        return Err(format!("{} must not contain `..`", shown(dir)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names() {
        for ok in ["gpu-01", "h0", "rack_b.gpu-3", "A1"] {
            host_name(ok).unwrap();
        }
        assert_eq!(
            host_name("-oProxyCommand=x").unwrap_err(),
            "\"-oProxyCommand=x\" has '='; a host name is letters, digits, `-`, `_` and `.`"
        );
        assert_eq!(
            host_name("-h1").unwrap_err(),
            "\"-h1\" must not start with `-` or `.`"
        );
        assert_eq!(
            host_name("..").unwrap_err(),
            "\"..\" must not start with `-` or `.`"
        );
        assert_eq!(
            host_name("gpu 1").unwrap_err(),
            "\"gpu 1\" has ' '; a host name is letters, digits, `-`, `_` and `.`"
        );
        assert!(host_name("").is_err());
        assert!(host_name(&"a".repeat(254)).is_err());
        host_name(&"a".repeat(253)).unwrap();
    }

    #[test]
    fn addresses() {
        for ok in [
            "10.0.0.1",
            "::1",
            "fe80::1",
            "gpu-01",
            "gpu01.example.com.",
            "h_1.lab",
        ] {
            address(ok).unwrap();
        }
        assert_eq!(
            address("-oProxyCommand=sh").unwrap_err(),
            "\"-oProxyCommand=sh\" must not start with `-` (ssh would read it as an option)"
        );
        for bad in [
            "", "gpu 01", "gpu\n01", "a..b", "a.-b", "h;reboot", "[::1]", "ops@h",
        ] {
            assert!(address(bad).is_err(), "{bad:?}");
        }
        let long_label = format!("{}.com", "a".repeat(64));
        assert!(address(&long_label).is_err());
    }

    #[test]
    fn users() {
        for ok in ["ops", "root", "svc_prover", "a.b-c", "_x"] {
            user(ok).unwrap();
        }
        assert_eq!(
            user("-oX").unwrap_err(),
            "\"-oX\" must not start with `-` or `.`"
        );
        assert_eq!(
            user("op s").unwrap_err(),
            "\"op s\" has ' '; a user name is letters, digits, `_`, `.` and `-`"
        );
        assert!(user("").is_err());
        assert!(user(&"u".repeat(33)).is_err());
        assert!(user("ops@h").is_err());
    }

    #[test]
    fn jump_hosts() {
        for ok in [
            "bastion",
            "ops@bastion",
            "ops@bastion:22",
            "bastion:65535",
            "10.0.0.1:2222",
            "::1",
            "[::1]",
            "ops@[fe80::1]:22",
        ] {
            jump_host(ok).unwrap();
        }
        assert_eq!(
            jump_host("bastion:0").unwrap_err(),
            "\"bastion:0\": port \"0\" must be a number from 1 to 65535"
        );
        assert_eq!(
            jump_host("bastion:65536").unwrap_err(),
            "\"bastion:65536\": port \"65536\" must be a number from 1 to 65535"
        );
        assert_eq!(
            jump_host("bastion:99999999999999999999").unwrap_err(),
            "\"bastion:99999999999999999999\": port \"99999999999999999999\" must be a number \
             from 1 to 65535"
        );
        assert_eq!(
            jump_host("-oProxyCommand=sh").unwrap_err(),
            "\"-oProxyCommand=sh\": host \"-oProxyCommand=sh\" must not start with `-` (ssh \
             would read it as an option)"
        );
        assert_eq!(
            jump_host("-x@bastion").unwrap_err(),
            "\"-x@bastion\": user \"-x\" must not start with `-` or `.`"
        );
        for bad in [
            "", "a,b", "ops@", "@h", "[::1", "[::1]x", "[h]:22", "h:", "h:+22",
        ] {
            assert!(jump_host(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn remote_dirs() {
        for ok in ["/opt/prover", "/data/prover/", "/srv/my prover", "/a/.b/c"] {
            remote_dir(ok).unwrap();
        }
        assert_eq!(
            remote_dir("opt/prover").unwrap_err(),
            "\"opt/prover\" must be an absolute path"
        );
        assert_eq!(
            remote_dir("/opt/../etc").unwrap_err(),
            "\"/opt/../etc\" must not contain `..`"
        );
        assert_eq!(
            remote_dir("/opt/p\nx").unwrap_err(),
            "\"/opt/p\\nx\" has the control character '\\n'"
        );
        assert_eq!(
            remote_dir("/opt/p;reboot").unwrap_err(),
            "\"/opt/p;reboot\" has ';'; a remote path may not hold any of ;$`'\"\\|&<>()*?[]{}!"
        );
        for bad in ["/opt/$HOME", "/opt/`id`", "/opt/'x'", "/opt/\"x\"", ""] {
            assert!(remote_dir(bad).is_err(), "{bad:?}");
        }
        assert!(remote_dir(&format!("/{}", "a".repeat(MAX_PATH))).is_err());
    }
}

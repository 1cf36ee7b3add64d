//! The lab's network: names of its links and namespaces, a `10.a.b.0/24`
//! claimed per lab, the bridge in the root namespace and one veth per host.

use super::error::LabError;
use super::procs::run_bounded;
use std::collections::BTreeSet;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Every `ip` call is local netlink work; this only guards against a wedged kernel.
const IP_TIMEOUT: Duration = Duration::from_secs(30);
/// Second octets the lab draws subnets from (10.200.0.0 - 10.249.255.0).
const SUBNET_A: std::ops::RangeInclusive<u8> = 200..=249;
/// Claims are global to the machine whatever base directory a lab uses.
pub(crate) const CLAIM_DIR: &str = "/run/fleetlab-subnets";

pub(crate) fn valid_id(id: &str) -> bool {
    id.len() == 6
        && id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// Interface names are limited to 15 bytes: `flb` + 6 = 9.
pub(crate) fn bridge_name(id: &str) -> String {
    format!("flb{id}")
}

/// `flv` + 6 + `h` + up to 3 digits = at most 13 bytes.
pub(crate) fn veth_name(id: &str, n: usize) -> String {
    format!("flv{id}h{n:02}")
}

pub(crate) fn netns_name(id: &str, n: usize) -> String {
    format!("fl-{id}-h{n:02}")
}

/// The bridge holds `.1`; host `n` (1-based) gets `.n+1`.
pub(crate) fn host_address(subnet: [u8; 2], n: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, subnet[0], subnet[1], (n + 1) as u8)
}

pub(crate) fn bridge_address(subnet: [u8; 2]) -> Ipv4Addr {
    Ipv4Addr::new(10, subnet[0], subnet[1], 1)
}

fn claim_path(subnet: [u8; 2]) -> PathBuf {
    Path::new(CLAIM_DIR).join(format!("10.{}.{}", subnet[0], subnet[1]))
}

/// Claims a /24 no other lab holds and no interface or route on this machine
/// uses. The claim is a file created with `O_EXCL`, so parallel labs in
/// different processes never pick the same one.
pub(crate) fn claim_subnet(id: &str, start: u32) -> Result<[u8; 2], LabError> {
    std::fs::create_dir_all(CLAIM_DIR).map_err(|e| LabError::io(CLAIM_DIR, "create", e))?;
    let in_use = subnets_in_use();
    let span = SUBNET_A.len() as u32 * 256;
    for k in 0..span {
        let slot = (start.wrapping_add(k)) % span;
        let subnet = [*SUBNET_A.start() + (slot / 256) as u8, (slot % 256) as u8];
        if in_use.contains(&subnet) {
            continue;
        }
        let path = claim_path(subnet);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut file) => {
                file.write_all(id.as_bytes())
                    .map_err(|e| LabError::io(&path, "write", e))?;
                return Ok(subnet);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(LabError::io(&path, "create", e)),
        }
    }
    Err(LabError::NoFreeSubnet {
        tried: span as usize,
    })
}

/// Releases the claim if (and only if) it is this lab's.
pub(crate) fn release_subnet(id: &str, subnet: [u8; 2]) -> Result<(), String> {
    let path = claim_path(subnet);
    match std::fs::read_to_string(&path) {
        Ok(owner) if owner == id => {
            std::fs::remove_file(&path).map_err(|e| format!("{}: remove: {e}", path.display()))
        }
        _ => Ok(()),
    }
}

/// `10.a.b` prefixes of every IPv4 address and route in the root namespace.
fn subnets_in_use() -> BTreeSet<[u8; 2]> {
    let mut used = BTreeSet::new();
    for args in [
        &["-4", "-o", "addr", "show"][..],
        &["-4", "route", "show", "table", "all"][..],
    ] {
        let Ok(out) = run_bounded("lab", Command::new("ip").args(args), IP_TIMEOUT) else {
            continue;
        };
        for word in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let addr = word.split('/').next().unwrap_or_default();
            if let Ok(ip) = addr.parse::<Ipv4Addr>() {
                let o = ip.octets();
                if o[0] == 10 {
                    used.insert([o[1], o[2]]);
                }
            }
        }
    }
    used
}

/// Feeds `lines` to one `ip -batch -` so a group of changes costs one process.
fn ip_batch(host: &str, netns: Option<&str>, lines: &[String]) -> Result<(), LabError> {
    let mut cmd = Command::new("ip");
    if let Some(ns) = netns {
        cmd.args(["-n", ns]);
    }
    cmd.args(["-batch", "-"]);
    let script = lines.join("\n") + "\n";
    let shown = format!("{} <<< {}", super::procs::render(&cmd), lines.join("; "));
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| LabError::Spawn {
            host: host.to_string(),
            command: shown.clone(),
            source,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        // A write error means ip exited early; its status and stderr say why.
        let _ = stdin.write_all(script.as_bytes());
    }
    let deadline = Instant::now() + IP_TIMEOUT;
    let Some(status) = super::procs::wait_until(&mut child, deadline) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(LabError::CommandTimeout {
            host: host.to_string(),
            command: shown,
            waited: IP_TIMEOUT,
        });
    };
    if status.success() {
        return Ok(());
    }
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        use std::io::Read;
        let _ = pipe.read_to_string(&mut stderr);
    }
    Err(LabError::Command {
        host: host.to_string(),
        command: shown,
        status: status.to_string(),
        stderr: stderr.trim().to_string(),
    })
}

/// The lab's bridge with `.1`: the root namespace's way to every host.
pub(crate) fn create_bridge(id: &str, subnet: [u8; 2]) -> Result<(), LabError> {
    let br = bridge_name(id);
    ip_batch(
        &format!("lab {id}"),
        None,
        &[
            // No STP listening/learning delay: ports forward as soon as they are up.
            format!("link add name {br} type bridge forward_delay 0"),
            format!("addr add {}/24 dev {br}", bridge_address(subnet)),
            format!("link set {br} up"),
        ],
    )
}

/// Host `n`'s namespace, its veth pair (`eth0` inside, the other end on the
/// bridge), its address and loopback. No default route: nothing leaves the lab.
pub(crate) fn create_host_net(
    host: &str,
    id: &str,
    n: usize,
    address: Ipv4Addr,
) -> Result<(), LabError> {
    let (ns, veth, br) = (netns_name(id, n), veth_name(id, n), bridge_name(id));
    ip_batch(
        host,
        None,
        &[
            format!("netns add {ns}"),
            format!("link add {veth} type veth peer name eth0 netns {ns}"),
            format!("link set {veth} master {br} up"),
        ],
    )?;
    ip_batch(
        host,
        Some(&ns),
        &[
            "link set lo up".to_string(),
            format!("addr add {address}/24 dev eth0"),
            "link set eth0 up".to_string(),
        ],
    )
}

/// Deletes veths, namespaces and the bridge by name; names already gone are
/// fine. Returns what is still there afterwards.
pub(crate) fn destroy(bridge: &str, hosts: &[(String, String)]) -> Vec<String> {
    let mut lines = Vec::new();
    for (netns, veth) in hosts {
        if link_exists(veth) {
            lines.push(format!("link del {veth}"));
        }
        if netns_exists(netns) {
            lines.push(format!("netns del {netns}"));
        }
    }
    if link_exists(bridge) {
        lines.push(format!("link del {bridge}"));
    }
    let mut problems = Vec::new();
    if !lines.is_empty() {
        let mut cmd = Command::new("ip");
        // -force: keep going past an object that vanished meanwhile; what
        // matters is checked below.
        cmd.args(["-force", "-batch", "-"]);
        let script = lines.join("\n") + "\n";
        let result = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                if let Some(mut stdin) = child.stdin.take() {
                    let _ = stdin.write_all(script.as_bytes());
                }
                match super::procs::wait_until(&mut child, Instant::now() + IP_TIMEOUT) {
                    Some(_) => Ok(()),
                    None => {
                        let _ = child.kill();
                        let _ = child.wait();
                        Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "ip -batch did not finish",
                        ))
                    }
                }
            });
        if let Err(e) = result {
            problems.push(format!("ip -force -batch: {e}"));
        }
    }
    for (netns, veth) in hosts {
        if netns_exists(netns) {
            problems.push(format!("network namespace {netns} still exists"));
        }
        if link_exists(veth) {
            problems.push(format!("link {veth} still exists"));
        }
    }
    if link_exists(bridge) {
        problems.push(format!("bridge {bridge} still exists"));
    }
    problems
}

pub(crate) fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

pub(crate) fn netns_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

/// Runs `tc` inside host's namespace `netns` on its `eth0`.
pub(crate) fn tc(host: &str, netns: &str, args: &[&str]) -> Result<std::process::Output, LabError> {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", netns, "tc"]).args(args);
    run_bounded(host, &mut cmd, IP_TIMEOUT)
}

/// Runs `tc` in the root namespace (on a veth's machine end).
pub(crate) fn tc_root(host: &str, args: &[&str]) -> Result<std::process::Output, LabError> {
    run_bounded(host, Command::new("tc").args(args), IP_TIMEOUT)
}

/// Token bucket for `mbit` megabits per second: a burst of 20 ms at that
/// rate (at least 32 KiB, above what any kernel tick needs), queueing at
/// most 100 ms before dropping, as a congested link does.
pub(crate) fn tbf_args(dev: &str, mbit: u32) -> Vec<String> {
    let burst = (u64::from(mbit) * 1_000_000 / 8 / 50).max(32 << 10);
    // Interface names hold no spaces (the kernel refuses them).
    format!("qdisc replace dev {dev} root tbf rate {mbit}mbit burst {burst} latency 100ms")
        .split(' ')
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_fit_the_kernel_limit_even_for_250_hosts() {
        let id = "0a1b2c";
        assert!(valid_id(id));
        assert!(bridge_name(id).len() <= 15);
        assert!(veth_name(id, 250).len() <= 15, "{}", veth_name(id, 250));
        assert_eq!(veth_name(id, 1), "flv0a1b2ch01");
    }

    #[test]
    fn addresses_leave_dot_one_to_the_bridge() {
        assert_eq!(bridge_address([213, 7]), Ipv4Addr::new(10, 213, 7, 1));
        assert_eq!(host_address([213, 7], 1), Ipv4Addr::new(10, 213, 7, 2));
        assert_eq!(host_address([213, 7], 250), Ipv4Addr::new(10, 213, 7, 251));
    }

    #[test]
    fn token_bucket_bursts_twenty_ms_and_never_less_than_32_kib() {
        let a = tbf_args("flv0a1b2ch01", 100);
        assert_eq!(
            a.join(" "),
            "qdisc replace dev flv0a1b2ch01 root tbf rate 100mbit burst 250000 latency 100ms"
        );
        assert!(tbf_args("x", 1).join(" ").contains("burst 32768 "));
    }

    #[test]
    fn ids_are_six_lowercase_hex_digits() {
        assert!(!valid_id("0A1b2c"));
        assert!(!valid_id("0a1b2"));
        assert!(!valid_id("0a1b2g"));
    }
}

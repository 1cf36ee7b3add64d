//! The fleetctl binary as a user runs it: exit codes, error locations,
//! plans, inventory inspection, a check-mode run on the local host.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs fleetctl; a run that hangs fails the test after 120 s.
fn fleetctl(cwd: &Path, args: &[&str]) -> Output {
    fleet_testkit::output_within(
        Command::new(env!("CARGO_BIN_EXE_fleetctl"))
            .args(args)
            .current_dir(cwd)
            .env_remove("FLEETCTL_STATE_DIR")
            .env("RUST_LOG", "warn"),
        std::time::Duration::from_secs(120),
    )
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn malformed_inventory_exits_1_with_file_line_column_and_expected_form() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "vars:\n  user: prover\nhosts:\n  gpu-01:\n    adress: 10.0.0.1\n",
    )
    .unwrap();
    let o = fleetctl(dir.path(), &["inventory", "list", "-i", "bad.yaml"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("bad.yaml:5:5: hosts.gpu-01: unknown field `adress`"),
        "{err}"
    );
    assert!(err.contains("expected form:"), "{err}");
    assert!(err.contains("HOST: { address: ADDR"), "{err}");
}

#[test]
fn malformed_playbook_exits_1_with_file_line_column_and_expected_form() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("pb.yaml"),
        "name: x\nstrategy: { batch: 2 }\nsteps:\n  - upload: {}\n  - reboot: {}\n",
    )
    .unwrap();
    let o = fleetctl(dir.path(), &["plan", "-p", "./pb.yaml"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("pb.yaml:5:5:"), "{err}");
    assert!(err.contains("unknown variant `reboot`"), "{err}");
    assert!(err.contains("expected form:\n    name: NAME"), "{err}");
}

#[test]
fn plan_shows_canary_then_batches_of_three_for_the_example_fleet() {
    let dir = tempfile::tempdir().unwrap();
    let binary = std::env::current_exe().unwrap();
    let inv = repo().join("inventories/example-fleet.yaml");
    let o = fleetctl(
        dir.path(),
        &[
            "plan",
            "-p",
            "rollout",
            "-i",
            inv.to_str().unwrap(),
            "--binary",
            binary.to_str().unwrap(),
        ],
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(out.contains("on 9 host(s)"), "{out}");
    assert!(out.contains("batch 1/4 (canary): gpu-a01\n"), "{out}");
    assert!(
        out.contains("batch 2/4: gpu-a02, gpu-a03, gpu-a04\n"),
        "{out}"
    );
    assert!(out.contains("batch 4/4: cpu-01, cpu-02\n"), "{out}");
    assert!(
        out.contains("gpu-b03 (ssh prover@10.20.2.13:2222 via ops@bastion.prover.example:22"),
        "{out}"
    );
    assert!(out.contains("1. upload: upload"), "{out}");
    assert!(
        out.contains("2. prepare: while the old daemon serves: `prover kernels warm`"),
        "{out}"
    );
    assert!(
        out.contains("3. handover: where MemAvailable holds the running daemon's resident memory"),
        "{out}"
    );
    assert!(out.contains("9. health:"), "{out}");
    // --limit narrows the plan to one group.
    let o = fleetctl(
        dir.path(),
        &[
            "plan",
            "-p",
            "health",
            "-i",
            inv.to_str().unwrap(),
            "--limit",
            "rack-b",
        ],
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        out.contains("on 3 host(s)") && out.contains("batch 1/1: gpu-b01, gpu-b02, gpu-b03"),
        "{out}"
    );
}

#[test]
fn inventory_show_explains_precedence_and_limit_errors_list_what_exists() {
    let dir = tempfile::tempdir().unwrap();
    let inv = repo().join("inventories/example-fleet.yaml");
    let inv = inv.to_str().unwrap();
    let o = fleetctl(
        dir.path(),
        &["inventory", "show", "gpu-b03", "-i", inv, "-e", "gpus=2"],
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        out.contains("gpus            = 2  <- default < vars < group rack-b < -e"),
        "{out}"
    );
    assert!(out.contains("\"max_gpu_temp_c\":80"), "{out}");
    assert!(out.contains("port=2222"), "{out}");

    let o = fleetctl(
        dir.path(),
        &["inventory", "list", "-i", inv, "--limit", "gpu-z*"],
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.contains("`gpu-z*` matches no host, group or tag"),
        "{err}"
    );
    assert!(err.contains("groups: gpu, rack-a, rack-b, cpu"), "{err}");

    let o = fleetctl(
        dir.path(),
        &["inventory", "list", "-i", inv, "--limit", "tag:canary,cpu"],
    );
    let (out, _) = text(&o);
    assert!(out.contains("(3 of 9 hosts)"), "{out}");
}

#[test]
fn check_run_on_the_builtin_local_inventory_changes_nothing_and_audits() {
    let dir = tempfile::tempdir().unwrap();
    let o = fleetctl(dir.path(), &["run", "-p", "restart", "--check", "--plain"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    assert!(out.contains("plan: playbook `restart`"), "{out}");
    assert!(out.contains("│ local"), "{out}");
    assert!(err.contains("[local] drain skipped"), "{err}");
    assert!(
        !dir.path().join(".deploy").exists(),
        "check mode created the install dir"
    );
    assert!(
        !dir.path().join(".fleetctl/state").exists(),
        "check mode keeps no state"
    );
    let audits: Vec<_> = std::fs::read_dir(dir.path().join(".fleetctl/audit"))
        .unwrap()
        .collect();
    assert_eq!(audits.len(), 1);
}

/// A check changes nothing, so its table says so: no host is `ok` on the
/// build it would ship; the release column is what the host runs (nothing).
#[test]
fn a_check_rollout_shows_hosts_unchanged_on_the_release_they_run() {
    let dir = tempfile::tempdir().unwrap();
    let binary = std::env::current_exe().unwrap();
    let o = fleetctl(
        dir.path(),
        &[
            "rollout",
            "--check",
            "--plain",
            "--binary",
            binary.to_str().unwrap(),
        ],
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with("│ local"))
        .unwrap_or_else(|| panic!("no row for local: {out}"));
    assert!(row.contains("checked, unchanged"), "{row}");
    let cells: Vec<&str> = row.trim_matches('│').split('┆').map(str::trim).collect();
    assert_eq!(
        cells[2], "-",
        "the new release shown for a host not changed: {row}"
    );
    assert!(!dir.path().join(".deploy").exists(), "check mode installed");
}

/// A `--binary` that is no program (a directory, a FIFO, an empty file, a
/// script) is refused in one line naming it, exit 1, before any host is
/// contacted: the canary here would refuse the connection (exit 3).
#[test]
fn a_binary_that_is_not_an_elf_program_is_refused_before_any_host() {
    let dir = tempfile::tempdir().unwrap();
    let down = fleet_testkit::RefusingAddr::new().unwrap();
    std::fs::write(
        dir.path().join("down.yaml"),
        format!(
            "hosts:\n  gpu-01: {{ address: 127.0.0.1, port: {}, user: ops }}\n",
            down.addr().port()
        ),
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("a-dir")).unwrap();
    std::fs::write(dir.path().join("empty"), b"").unwrap();
    std::fs::write(
        dir.path().join("script"),
        b"#!/bin/sh\nexec prover \"$@\"\n",
    )
    .unwrap();
    let fifo = std::ffi::CString::new(dir.path().join("fifo").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    for (binary, what) in [
        ("a-dir", "is a directory, not a regular file"),
        ("fifo", "is a FIFO, not a regular file"),
        ("empty", "is empty"),
        (
            "script",
            "not an ELF executable (it does not start with the ELF magic bytes)",
        ),
    ] {
        let o = fleetctl(
            dir.path(),
            &["rollout", "-i", "down.yaml", "--binary", binary, "--plain"],
        );
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{binary}: {out}\n{err}");
        assert_eq!(
            err,
            format!(
                "error: binary {binary}: {what} (build it with `cargo build --release -p prover`, \
                 or pass --binary PATH)\n"
            )
        );
        assert!(out.is_empty(), "{binary}: nothing ran: {out}");
        assert!(!dir.path().join(".fleetctl").exists(), "{binary}: no run");
    }
}

/// Regression (issue 51, item 13c): a `config_file` that is not there is
/// found before any host is contacted (exit 1 naming the host and file),
/// not by each host's upload after connect and lock (the host here would
/// refuse the connection: exit 3).
#[test]
fn a_missing_config_file_is_refused_before_any_host() {
    let dir = tempfile::tempdir().unwrap();
    let down = fleet_testkit::RefusingAddr::new().unwrap();
    std::fs::write(
        dir.path().join("down.yaml"),
        format!(
            "hosts:\n  gpu-01: {{ address: 127.0.0.1, port: {}, user: ops, config_file: gone.toml }}\n",
            down.addr().port()
        ),
    )
    .unwrap();
    let binary = env!("CARGO_BIN_EXE_fleetctl");
    let o = fleetctl(
        dir.path(),
        &["rollout", "-i", "down.yaml", "--binary", binary, "--plain"],
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    assert!(
        err.contains("host gpu-01: config_file: cannot read config file")
            && err.contains("gone.toml")
            && err.contains("nothing was contacted"),
        "{err}"
    );
    assert!(out.is_empty(), "nothing ran: {out}");
    assert!(!dir.path().join(".fleetctl").exists(), "no run");
}

/// `-p` takes a built-in by bare name, a file only by a path with a `/`.
#[test]
fn a_bare_playbook_name_that_is_no_built_in_lists_the_built_ins() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("mine.yaml"),
        "name: mine\nsteps:\n  - health: {}\n",
    )
    .unwrap();
    let o = fleetctl(dir.path(), &["plan", "-p", "mine.yaml"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(
        err,
        "error: playbook `mine.yaml`: not a built-in playbook (rollout, restart, rollback, \
         health, stop, collect-timing); a playbook file is named by a path with a `/`, \
         e.g. `./mine.yaml`\n"
    );
    let o = fleetctl(dir.path(), &["plan", "-p", "./mine.yaml"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(out.contains("mine"), "{out}");
}

#[test]
fn missing_binary_and_unknown_resume_are_errors_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let o = fleetctl(dir.path(), &["rollout", "--binary", "no/such/prover"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no/such/prover") && err.contains("cargo build --release -p prover"),
        "{err}"
    );
    let o = fleetctl(
        dir.path(),
        &["run", "-p", "health", "--resume", "20990101T000000Z-0000"],
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("no state file"), "{err}");
    assert!(!dir.path().join(".deploy").exists());
}

/// A resume refuses a build other than the one its run shipped (a mixed
/// fleet), naming both checksums, and an inventory other than its run's.
/// Both are refused before any host is contacted.
#[test]
fn a_resume_refuses_another_build_or_inventory_naming_both() {
    use sha2::Digest;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("fleet.yaml"),
        "vars:\n  transport: ssh\n  user: ops\n  install_dir: /data/prover\nhosts:\n  gpu-01: { address: 192.0.2.1 }\n",
    )
    .unwrap();
    let build = crate::fake_build(b"another build");
    std::fs::write(dir.path().join("prover-new"), &build).unwrap();
    let new_sha = hex::encode(sha2::Sha256::digest(&build));
    let shipped = "ab".repeat(32);
    std::fs::create_dir_all(dir.path().join(".fleetctl/state")).unwrap();
    let state = serde_json::json!({
        "version": 1, "run_id": "r1", "playbook": "rollout", "inventory": "fleet.yaml",
        "hosts": {"gpu-01": "not_started"}, "updated": "2026-01-01T00:00:00Z",
        "origin": {"playbook": "rollout", "inventory": "fleet.yaml", "limit": null,
                   "extra_vars": [], "binary": "prover-old", "sha256": shipped},
    });
    std::fs::write(
        dir.path().join(".fleetctl/state/r1.json"),
        state.to_string(),
    )
    .unwrap();

    let o = fleetctl(
        dir.path(),
        &["rollout", "--resume", "r1", "--binary", "prover-new"],
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(&shipped) && err.contains(&new_sha), "{err}");

    let o = fleetctl(
        dir.path(),
        &["rollout", "--resume", "r1", "-i", "other.yaml"],
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("`fleet.yaml`") && err.contains("`other.yaml`"),
        "{err}"
    );
}

/// A variable one edit from a setting (or a setting with a unit suffix)
/// is passed on, as free variables are, but warned about, naming the
/// setting; a tab in a playbook's indentation is named as such.
#[test]
fn a_near_miss_of_a_setting_is_warned_about_and_a_tab_is_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("fleet.yaml"),
        "vars:\n  transport: ssh\n  connect_timeout_s: 5\n  instal_dir: /opt/p\nhosts:\n  gpu-01: { address: 192.0.2.1 }\n",
    )
    .unwrap();
    let o = fleetctl(dir.path(), &["inventory", "list", "-i", "fleet.yaml"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    assert!(
        err.contains("`connect_timeout_s`") && err.contains("did you mean `connect_timeout`?"),
        "{err}"
    );
    assert!(err.contains("did you mean `install_dir`?"), "{err}");
    // stderr is a pipe here: plain text, no ANSI colour codes.
    assert!(!err.contains('\u{1b}'), "ANSI escape on a pipe: {err:?}");

    std::fs::write(
        dir.path().join("tabbed.yaml"),
        "name: x\nsteps:\n\t- health: {}\n",
    )
    .unwrap();
    let o = fleetctl(dir.path(), &["plan", "-p", "./tabbed.yaml"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("tabbed.yaml:3:")
            && err.contains("tab characters are not allowed in YAML indentation")
            && !err.contains("cannot start any token"),
        "{err}"
    );
}

/// A hostile inventory or playbook is refused when read, in one line
/// naming the file and the offending value, exit 1, before any host.
#[test]
fn hostile_inventories_and_playbooks_are_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &[u8]| std::fs::write(dir.path().join(name), text).unwrap();
    write(
        "opt.yaml",
        b"hosts:\n  gpu-01: { address: \"-oProxyCommand=touch /tmp/x\" }\n",
    );
    write(
        "dir.yaml",
        b"vars: { install_dir: \"/opt/p`reboot`\" }\nhosts:\n  gpu-01: {}\n",
    );
    write(
        "deep.yaml",
        format!("hosts: {}{}\n", "[".repeat(100_000), "]".repeat(100_000)).as_bytes(),
    );
    let big = std::fs::File::create(dir.path().join("big.yaml")).unwrap();
    big.set_len((16 << 20) + 1).unwrap();
    for (file, what) in [
        (
            "opt.yaml",
            "opt.yaml: host `gpu-01`: `address` (set by host) \"-oProxyCommand=touch /tmp/x\" \
             must not start with `-` (ssh would read it as an option)",
        ),
        (
            "dir.yaml",
            "dir.yaml: host `gpu-01`: `install_dir` (set by vars) \"/opt/p`reboot`\" has '`'; \
             a remote path may not hold any of ;$`'\"\\|&<>()*?[]{}!",
        ),
        (
            "deep.yaml",
            "deep.yaml:1: flow collections (`[` `{`) nested deeper than 64 levels",
        ),
        (
            "big.yaml",
            "inventory big.yaml: 16777217 bytes, more than the 16777216 allowed",
        ),
    ] {
        let o = fleetctl(dir.path(), &["inventory", "list", "-i", file]);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{file}: {err}");
        assert_eq!(err, format!("error: {what}\n"), "{file}");
        assert!(out.is_empty(), "{file}: {out}");
    }
    write(
        "pb.yaml",
        format!("name: x\nsteps: {}\n", "[".repeat(65)).as_bytes(),
    );
    let o = fleetctl(dir.path(), &["plan", "-p", "./pb.yaml"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(
        err,
        "error: ./pb.yaml:2: flow collections (`[` `{`) nested deeper than 64 levels\n"
    );
}

/// `timing report` reads only regular files, and holds no line past 1 MiB:
/// a FIFO would block it, a device or one endless line fill memory. A
/// special file is one line naming it, exit 1; an endless line is passed
/// over and listed.
#[test]
fn timing_report_refuses_special_files_and_passes_over_endless_lines() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("gpu-01");
    std::fs::create_dir(&host).unwrap();
    let fifo = std::ffi::CString::new(host.join("fifo.jsonl").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let mut long = b"{}\n".to_vec();
    long.extend(std::iter::repeat_n(b'x', (1 << 20) + 1));
    std::fs::write(host.join("long.jsonl"), long).unwrap();
    for (file, what) in [
        (
            "gpu-01/fifo.jsonl",
            "timing file gpu-01/fifo.jsonl: is a FIFO, not a regular file",
        ),
        (
            "gpu-01",
            "timing file gpu-01: is a directory, not a regular file",
        ),
        (
            "/dev/zero",
            "timing file /dev/zero: is a device, not a regular file",
        ),
    ] {
        let o = fleetctl(dir.path(), &["timing", "report", file]);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{file}: {err}");
        assert_eq!(err, format!("error: {what}\n"), "{file}");
        assert!(out.is_empty(), "{file}: {out}");
    }
    // An endless line is passed over without being held and listed; the
    // rest of the file is reported (issue 51, item 11: it failed the whole
    // report).
    let o = fleetctl(dir.path(), &["timing", "report", "gpu-01/long.jsonl"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        out.contains("gpu-01/long.jsonl:2: line of 1048577 bytes, longer than the 1048576"),
        "{out}"
    );
}

/// The defaults the docs give for `timing collect` are those `--help`
/// shows (they once said 60 s against 120 s).
#[test]
fn timing_collect_defaults_in_the_docs_are_those_of_help() {
    let o = fleetctl(&repo(), &["timing", "collect", "--help"]);
    let (help, _) = text(&o);
    let doc = std::fs::read_to_string(repo().join("docs/timing.md")).unwrap();
    let usage = doc
        .lines()
        .find(|l| l.starts_with("fleetctl timing collect "))
        .expect("usage line in docs/timing.md");
    for (flag, default) in [("--deadline", "120s"), ("--store", ".fleetctl/timing")] {
        assert!(
            help.contains(&format!("[default: {default}]")),
            "--help: {flag} {default}\n{help}"
        );
        assert!(
            usage.contains(&format!("[{flag} {default}]")),
            "docs: {flag} {default}: {usage}"
        );
    }
}

#[test]
fn malformed_experiment_exits_1_with_file_line_column_before_touching_a_host() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("exp.yaml"),
        "name: x\nhosts: { canary: 1, baseline: 1 }\nworkload:\n  submit: { size: 1024, jobs: 20, concurency: 2 }\n",
    )
    .unwrap();
    let o = fleetctl(dir.path(), &["experiment", "-f", "exp.yaml", "--plain"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("exp.yaml:4:"), "{err}");
    assert!(err.contains("unknown field `concurency`"), "{err}");
    assert!(err.contains("expected form:\n    name: NAME"), "{err}");
    assert!(out.is_empty(), "nothing ran: {out}");
    // Two groups out of the one host of the built-in local inventory: refused.
    std::fs::write(
        dir.path().join("two.yaml"),
        "name: x\nhosts: { canary: 1, baseline: 1 }\nworkload:\n  submit: { size: 1024, jobs: 20 }\n",
    )
    .unwrap();
    let o = fleetctl(
        dir.path(),
        &[
            "experiment",
            "-f",
            "two.yaml",
            "--plain",
            "--binary",
            "exp.yaml",
        ],
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("hosts.baseline: 1 wanted, 0 left"), "{err}");
    let o = fleetctl(dir.path(), &["experiment", "--resume", "exp-nope"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("exp-nope.json"), "{err}");
}

#[test]
fn a_failed_canary_halts_the_rollout_with_exit_3_and_starts_no_other_host() {
    let dir = tempfile::tempdir().unwrap();
    // Two hosts whose SSH port refuses connections: the canary (the first
    // host, `rollout`'s canary 1 and max_fail 0) fails to connect.
    let down = [
        fleet_testkit::RefusingAddr::new().unwrap(),
        fleet_testkit::RefusingAddr::new().unwrap(),
    ];
    let inv = dir.path().join("down.yaml");
    std::fs::write(
        &inv,
        format!(
            "vars:\n  transport: ssh\n  user: ops\n  install_dir: /data/prover\nhosts:\n  \
             gpu-01: {{ address: 127.0.0.1, port: {} }}\n  gpu-02: {{ address: 127.0.0.1, port: {} }}\n",
            down[0].addr().port(),
            down[1].addr().port()
        ),
    )
    .unwrap();
    let o = fleetctl(
        dir.path(),
        &[
            "rollout",
            "-i",
            inv.to_str().unwrap(),
            "--binary",
            env!("CARGO_BIN_EXE_fleetctl"),
            "--plain",
        ],
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(3), "{out}\n{err}");
    let row = |host: &str| {
        out.lines()
            .find(|l| l.contains(host))
            .unwrap_or_else(|| panic!("no row for {host}:\n{out}"))
            .to_string()
    };
    assert!(row("gpu-01").contains("UNREACHABLE"), "{out}");
    assert!(row("gpu-02").contains("not started"), "{out}");
    assert!(
        out.contains("HALTED") && out.contains("not started: gpu-02"),
        "{out}"
    );
}

/// The audit log's events so far (the log of the one run in `dir`); empty
/// before it exists. A line being written may be cut off: it is left out.
fn audit_events(dir: &Path) -> Vec<fleetctl::executor::Event> {
    let Ok(entries) = std::fs::read_dir(dir.join(".fleetctl/audit")) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .flat_map(|e| {
            std::fs::read_to_string(e.path())
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Waits (bounded) until the audit log has an event `pred` accepts.
fn wait_for_event(dir: &Path, what: &str, pred: impl Fn(&fleetctl::executor::EventKind) -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !audit_events(dir).iter().any(|e| pred(&e.kind)) {
        assert!(
            std::time::Instant::now() < deadline,
            "no {what} in the audit log: {:?}",
            audit_events(dir)
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn ctrl_c(pid: u32) {
    // SAFETY: kill(2) has no memory preconditions.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) }, 0);
}

/// Ctrl-C during a step that would wait ten minutes (verify, with no
/// daemon on the local host): the first lets the step run on, the second
/// aborts it; the run exits 130 with its state and audit log whole.
#[test]
fn a_second_ctrl_c_aborts_the_running_step_and_exits_130_with_state_and_audit_kept() {
    use fleetctl::executor::{EventKind, HostStatus};
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("wait.yaml"),
        "name: wait\nsteps:\n  - verify: { timeout: 10m, poll: 50ms }\n",
    )
    .unwrap();
    let mut run = fleet_testkit::spawn_within(
        Command::new(env!("CARGO_BIN_EXE_fleetctl"))
            .args(["run", "-p", "./wait.yaml", "--plain"])
            .current_dir(dir.path())
            .env_remove("FLEETCTL_STATE_DIR")
            .env("RUST_LOG", "warn"),
        std::time::Duration::from_secs(120),
    );
    let verifying =
        |k: &EventKind| matches!(k, EventKind::StepStarted { step } if step == "verify");
    wait_for_event(dir.path(), "verify started", verifying);
    ctrl_c(run.id());
    wait_for_event(dir.path(), "first interrupt", |k| {
        matches!(k, EventKind::Interrupt { abort: false })
    });
    assert!(!run.has_exited(), "the first Ctrl-C cut the step short");
    ctrl_c(run.id());
    let o = run.output();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(130), "{out}\n{err}");

    let events = audit_events(dir.path());
    let kinds: Vec<&EventKind> = events.iter().map(|e| &e.kind).collect();
    assert!(
        kinds
            .iter()
            .any(|k| matches!(k, EventKind::Interrupt { abort: true })),
        "{kinds:?}"
    );
    assert!(
        kinds
            .iter()
            .any(|k| matches!(k, EventKind::StepFailed { step, error, .. }
            if step == "verify" && error.contains("second Ctrl-C"))),
        "{kinds:?}"
    );
    assert!(
        matches!(kinds.last(), Some(EventKind::RunFinished { ok: 0, .. })),
        "the audit log ends with the run: {kinds:?}"
    );
    let run_id = &events[0].run_id;
    assert!(
        out.contains(&format!("--resume {run_id}")),
        "resume command printed: {out}"
    );
    let state = fleetctl::executor::state::load(&dir.path().join(".fleetctl"), run_id)
        .expect("state file readable");
    assert_eq!(
        state.hosts.get("local"),
        Some(&HostStatus::Interrupted),
        "{state:?}"
    );
    // The host's lock was given back: a resume can take it.
    assert!(
        !dir.path().join(".deploy/local/state/lock").exists(),
        "the host lock is left behind"
    );
}

#[test]
fn a_usage_error_has_its_own_exit_code_not_that_of_a_failed_host() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["rollout", "--limt", "h1"][..],
        &["run"][..],
        &["frobnicate"][..],
        &["timing", "collect", "--parallel", "many"][..],
    ] {
        let o = fleetctl(dir.path(), args);
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {err}");
        assert!(err.starts_with("error:"), "{args:?}: {err}");
    }
    for args in [&["--help"][..], &["--version"][..], &["run", "--help"][..]] {
        let o = fleetctl(dir.path(), args);
        assert_eq!(o.status.code(), Some(0), "{args:?}");
        assert!(!o.stdout.is_empty(), "{args:?}");
    }
    // A --limit of no pattern is such an error too, for every command that
    // takes one, before anything is read.
    for args in [
        &["rollout", "--limit", ""][..],
        &["run", "-p", "health", "--limit", " , "][..],
        &["inventory", "list", "-l", ","][..],
        &["status", "--limit="][..],
    ] {
        let o = fleetctl(dir.path(), args);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {err}");
        assert!(
            err.starts_with("error: invalid value ")
                && err
                    .contains("for '--limit <PATTERN>': no host pattern in it; leave --limit out"),
            "{args:?}: {err}"
        );
        assert!(out.is_empty(), "{args:?}: {out}");
    }
    assert!(!dir.path().join(".fleetctl").exists(), "nothing ran");
    // Every number on the command line is bounded, as a usage error.
    for (args, says) in [
        (
            &["timing", "collect", "--deadline", "0s"][..],
            "`deadline` must be from 1s to 1day, not 0s",
        ),
        (
            &["status", "--deadline", "9999999999h"][..],
            "`deadline` must be from 1s to 1day",
        ),
        (
            &["timing", "collect", "--parallel", "0"][..],
            "not in 1..=1024",
        ),
        (
            &["timing", "collect", "--chunk-bytes", "1"][..],
            "not in 4096..=268435456",
        ),
        (
            &["timing", "report", "--min-busy", "NaN"][..],
            "must be from 0 to 1, not NaN",
        ),
        (
            &["timing", "report", "--min-h2d-gbps=-1"][..],
            "must be from 0 to 10000, not -1",
        ),
        // A resume id names a state file: a path is not one.
        (
            &["rollout", "--resume", "../../etc/x"][..],
            "\"../../etc/x\" is not an id of fleetctl's",
        ),
        (
            &["experiment", "--resume", "a/b"][..],
            "\"a/b\" is not an id of fleetctl's",
        ),
    ] {
        let o = fleetctl(dir.path(), args);
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {err}");
        assert!(
            err.starts_with("error: invalid value ") && err.contains(says),
            "{args:?}: {err}"
        );
    }
    // The table in the docs names the code.
    let doc = std::fs::read_to_string(repo().join("docs/playbooks.md")).unwrap();
    assert!(doc.contains("| 64 | usage error"), "docs/playbooks.md");
}

/// The command between the last pair of backticks of a message, as words
/// (none of ours has a quoted argument with a space).
fn printed_command(msg: &str) -> Vec<String> {
    let end = msg
        .rfind('`')
        .unwrap_or_else(|| panic!("no command in: {msg}"));
    let start = msg[..end]
        .rfind('`')
        .unwrap_or_else(|| panic!("no command in: {msg}"));
    msg[start + 1..end]
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// The command a refused resume prints is run as printed: it is accepted
/// (no usage error, no conflict) and continues that run. A resume given
/// another playbook once said "leave -p out", which `run` does not accept.
#[test]
fn the_command_a_refused_resume_prints_resumes_the_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".fleetctl/state")).unwrap();
    let state = serde_json::json!({
        "version": 1, "run_id": "r2", "playbook": "stop", "inventory": "(built-in local inventory)",
        "hosts": {"local": "not_started"}, "updated": "2026-01-01T00:00:00Z",
        "origin": {"playbook": "stop", "inventory": null, "limit": null,
                   "extra_vars": [], "binary": null, "sha256": null},
    });
    std::fs::write(
        dir.path().join(".fleetctl/state/r2.json"),
        state.to_string(),
    )
    .unwrap();
    for wrong in [
        &["run", "-p", "restart", "--resume", "r2"][..],
        &["rollout", "--resume", "r2"][..],
        &["run", "-p", "stop", "--limit", "local,!x", "--resume", "r2"][..],
    ] {
        let o = fleetctl(dir.path(), wrong);
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{wrong:?}: {err}");
        let cmd = printed_command(&err);
        assert_eq!(cmd[..3], ["fleetctl", "run", "-p"], "{err}");
        assert_eq!(cmd[3], "stop", "{err}");
        let args: Vec<&str> = cmd[1..]
            .iter()
            .map(String::as_str)
            .chain(["--plain"])
            .collect();
        let o = fleetctl(dir.path(), &args);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(0), "{cmd:?}: {out}\n{err}");
        assert!(out.contains("run r2 (stop)"), "it resumed that run: {out}");
        // Resumed to the end: the next try has nothing left, and says so the same way.
        std::fs::write(
            dir.path().join(".fleetctl/state/r2.json"),
            state.to_string(),
        )
        .unwrap();
    }
}

/// The experiment's `keep` hint, run as printed: it acts on the
/// experiment's own inventory and hosts (it once had no `-i`, so it ran
/// against the built-in local inventory, where the canaries do not exist).
#[test]
fn the_keep_hint_of_an_experiment_runs_on_its_inventory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("fleet.yaml"),
        "hosts:\n  c1: { transport: local, install_dir: c1 }\n  c2: { transport: local, install_dir: c2 }\n  b1: { transport: local, install_dir: b1 }\n",
    )
    .unwrap();
    let origin = fleetctl::experiment::state::Origin {
        definition: "exp.yaml".into(),
        inventory: Some("fleet.yaml".into()),
        limit: None,
        extra_vars: vec!["gpus=0".into()],
        binary: "prover".into(),
        sha256: "aa".into(),
        store: ".fleetctl/timing".into(),
    };
    let hint = fleetctl::experiment::run::keep_hint(
        &origin,
        &["c1".into(), "c2".into()],
        Path::new(".fleetctl"),
    );
    let words: Vec<&str> = hint.split_whitespace().collect();
    assert_eq!(words[0], "fleetctl");
    let o = fleetctl(dir.path(), &[&words[1..], &["--plain"]].concat());
    let (out, err) = text(&o);
    // Nothing was ever installed there, so the rollback itself fails (2),
    // on exactly the canaries of that inventory.
    assert_eq!(o.status.code(), Some(2), "{hint}: {out}\n{err}");
    assert!(out.contains("│ c1") && out.contains("│ c2"), "{out}");
    assert!(!out.contains("│ b1") && !out.contains("│ local"), "{out}");
    assert!(
        out.contains("no previous release that passed verify"),
        "{out}"
    );
}

//! `upload`: ship the binary and its config into the content-addressed
//! `releases/<sha256>/`, verified on the host before it gets its final name.

use super::compress::{self, Compressed, DECODER, ENCODING};
use super::ctx::StepCtx;
use super::outcome::{kept, Cause, Failed, StepOutcome};
use super::params::{self as bounds, Check};
use super::params::{duration, ByteSize};
use super::progress::Sent;
use super::release::sha256_file;
use super::remote::{self, is_release_id, q, QUICK};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UploadParams {
    /// Releases kept on the host (the current, previous, and last verified
    /// ones always are).
    pub keep_releases: usize,
    /// Deadline for each file transfer.
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// Send the binary gzip-compressed (compressed once per run, inflated
    /// by the host's `gzip`); plain when the host has no gzip or the build
    /// does not compress.
    pub compress: bool,
}

impl Default for UploadParams {
    fn default() -> Self {
        UploadParams {
            keep_releases: 3,
            timeout: Duration::from_secs(300),
            compress: true,
        }
    }
}

impl Check for UploadParams {
    fn check(&self) -> Result<(), String> {
        // Each kept release is a full build on the host's disk.
        bounds::in_range("keep_releases", self.keep_releases, &(0..=1000))?;
        bounds::duration_in("timeout", self.timeout, &bounds::TIMEOUTS)
    }
}

/// How the binary goes over the link.
enum Way {
    Compressed(Arc<Compressed>),
    /// The reason when compression was asked for.
    Plain(Option<String>),
}

pub fn describe(p: &UploadParams, ctx: &StepCtx<'_>) -> String {
    let config = ctx
        .release
        .config
        .as_ref()
        .map_or(String::new(), |c| format!(" and {}", c.display()));
    format!(
        "upload {}{config} to {}/{}, keep {} releases",
        ctx.release.binary.display(),
        ctx.layout().release(&ctx.release.id),
        if p.compress {
            format!(" ({ENCODING}-compressed where the host has {ENCODING})")
        } else {
            String::new()
        },
        p.keep_releases
    )
}

const KEPT: &str = "existing releases, `current` and the running daemon";

pub(super) async fn run(p: &UploadParams, ctx: &mut StepCtx<'_>) -> Result<StepOutcome, Failed> {
    let layout = ctx.layout();
    // The folder is the release id (binary and config together); the files
    // in it are checked against their own sums.
    let id = ctx.release.id.clone();
    let short = &id[..12.min(id.len())];
    let dir = layout.release(&id);
    let sha = ctx.release.binary_sha256.clone();
    let config_sha = match (&ctx.release.config, &ctx.release.config_sha256) {
        (Some(_), Some(sum)) => Some(sum.clone()),
        (Some(c), None) => Some(kept(sha256_file(c), KEPT)?),
        (None, _) => None,
    };

    // Under the host's rollout lock no other upload runs here: every
    // temporary file is what an upload killed mid-transfer left.
    let swept = if ctx.check {
        String::new()
    } else {
        kept(sweep_temporaries(ctx).await, KEPT)?
    };
    if kept(present(ctx, &dir, &sha, config_sha.as_deref()).await, KEPT)? {
        if ctx.check {
            return Ok(StepOutcome::skipped(format!(
                "check mode: release {short} already present and verified"
            )));
        }
        kept(
            ctx.transport
                .run_script_ok(&format!("touch {}", kept(q(&dir), KEPT)?), QUICK)
                .await,
            KEPT,
        )?;
        kept(runs_here(ctx, &dir).await, KEPT)?;
        let pruned = kept(prune(ctx, p.keep_releases).await, KEPT)?;
        return Ok(StepOutcome::skipped(format!(
            "release {short} already present and verified{swept}{pruned}"
        )));
    }
    if ctx.check {
        return Ok(StepOutcome::skipped(format!(
            "check mode: would {}",
            describe(p, ctx)
        )));
    }

    kept(same_architecture(ctx).await, KEPT)?;
    let qdir = kept(q(&dir), KEPT)?;
    // Whether the host's gzip round-trips a word is asked in the same round
    // trip: a decoder that is missing, not executable or broken reads as absent.
    let mkdirs = format!(
        "mkdir -p {0} && cd {0} && mkdir -p releases run logs state params && if [ -d {qdir} ]; then echo {EXISTED}; else mkdir {qdir}; fi && if [ \"$(echo ok | {1} -c 2>/dev/null | {2} 2>/dev/null)\" = ok ]; then echo {HAS_DECODER}; fi",
        kept(q(&layout.install), KEPT)?,
        DECODER[0],
        kept(crate::transport::quote::join(DECODER), KEPT)?,
    );
    let out = kept(ctx.transport.run_script_ok(&mkdirs, QUICK).await, KEPT)?;
    let said = out.stdout_text();
    let dir_existed = said.lines().any(|l| l == EXISTED);
    let way = choose(p, ctx, said.lines().any(|l| l == HAS_DECODER)).await;

    let tag: u64 = rand::random();
    let tmp_bin = format!("{dir}/.prover.{tag:016x}.tmp");
    let tmp_cfg = format!("{dir}/.prover.toml.{tag:016x}.tmp");
    let cleanup = kept(cleanup_script(&tmp_bin, &tmp_cfg, &dir, dir_existed), KEPT)?;
    let kept_cleaned = format!("{KEPT}; temporary files removed");

    let transfer = async {
        // The fault hook sends a copy with one byte flipped, as a bad disk or
        // link would, so the host-side check is exercised for real.
        let corrupted = if ctx.faults.corrupt_upload {
            Some(corrupt_copy(&ctx.release.binary)?)
        } else {
            None
        };
        let source = corrupted
            .as_ref()
            .map_or(ctx.release.binary.as_path(), |t| t.path());
        let mut sent_bin = file_len(ctx);
        match &way {
            Way::Compressed(shared) => {
                // A corrupted copy is this host's own: compressed here.
                let own =
                    match &corrupted {
                        Some(_) => Some(compress::compress_async(source).await.map_err(|e| {
                            Cause::Local {
                                path: e.path,
                                source: e.source,
                            }
                        })?),
                        None => None,
                    };
                let c: &Compressed = own.as_ref().unwrap_or(&**shared);
                sent_bin = c.len;
                ctx.transport
                    .upload_through(c.path(), DECODER, &tmp_bin, p.timeout)
                    .await?;
            }
            Way::Plain(_) => ctx.transport.upload(source, &tmp_bin, p.timeout).await?,
        }
        let mut sum_cmd = format!("sha256sum {}", q(&tmp_bin)?);
        let mut mv_cmd = format!(
            "chmod 0755 {tb} && mv -f {tb} {qdir}/prover",
            tb = q(&tmp_bin)?
        );
        if let Some(config) = &ctx.release.config {
            ctx.transport.upload(config, &tmp_cfg, p.timeout).await?;
            sum_cmd.push_str(&format!(" {}", q(&tmp_cfg)?));
            mv_cmd.push_str(&format!(" && mv -f {} {qdir}/prover.toml", q(&tmp_cfg)?));
        }
        let sums = ctx.transport.run_script_ok(&sum_cmd, QUICK).await?;
        let got = parse_sums(&sums.stdout_text());
        let bin_got = got.first().map_or("nothing", String::as_str);
        if bin_got != sha {
            return Err(Cause::Check(format!(
                "sha256 mismatch after transfer: binary expected {sha}, host has {bin_got}"
            )));
        }
        if let Some(want) = &config_sha {
            let cfg_got = got.get(1).map_or("nothing", String::as_str);
            if cfg_got != want {
                return Err(Cause::Check(format!(
                    "sha256 mismatch after transfer: config expected {want}, host has {cfg_got}"
                )));
            }
        }
        ctx.transport.run_script_ok(&mv_cmd, QUICK).await?;
        Ok::<_, Cause>(sent_bin)
    };
    let sent_bin = match transfer.await {
        Ok(n) => n,
        Err(cause) => {
            // Cleanup failing too must not hide the first error.
            if let Err(e) = ctx.transport.run_script(&cleanup, QUICK).await {
                return Err((cause, format!("{KEPT}; temporary files may remain ({e})")));
            }
            return Err((disk_full_hint(cause), kept_cleaned));
        }
    };
    let config_len = ctx
        .release
        .config
        .as_ref()
        .and_then(|c| std::fs::metadata(c).ok())
        .map_or(0, |m| m.len());
    let sent = Sent {
        file_bytes: file_len(ctx) + config_len,
        sent_bytes: sent_bin + config_len,
        encoding: match way {
            Way::Compressed(_) => ENCODING,
            Way::Plain(_) => PLAIN,
        },
        plain_because: match way {
            Way::Compressed(_) => None,
            Way::Plain(why) => why,
        },
    };
    let how = sent_words(&sent);
    ctx.state.uploaded = Some(sent);
    if let Err(cause) = runs_here(ctx, &dir).await {
        // A build that cannot start here is no release of this host: what
        // this step made goes, as after a failed transfer.
        if dir_existed {
            return Err((cause, format!("{KEPT}; {dir} was there before and is kept")));
        }
        let rm = kept(q(&dir), KEPT)?;
        return match ctx
            .transport
            .run_script_ok(&format!("rm -rf -- {rm}"), QUICK)
            .await
        {
            Ok(_) => Err((cause, format!("{KEPT}; the uploaded release was removed"))),
            Err(e) => Err((
                cause,
                format!("{KEPT}; the uploaded release may remain ({e})"),
            )),
        };
    }
    let pruned = kept(prune(ctx, p.keep_releases).await, KEPT)?;
    Ok(StepOutcome::done(format!(
        "uploaded release {short} ({}; {how}){swept}{pruned}",
        ByteSize(file_len(ctx))
    )))
}

/// [`Sent::encoding`] of an upload sent as it is.
pub const PLAIN: &str = "plain";
/// What the mkdirs script prints when the release folder was there.
const EXISTED: &str = "existed";
/// What it prints when the host has the decoder.
const HAS_DECODER: &str = "has-decoder";

/// Compressed when asked for, the host can inflate it, and compression
/// pays; plain otherwise, with the reason logged and recorded.
async fn choose(p: &UploadParams, ctx: &StepCtx<'_>, host_has_decoder: bool) -> Way {
    if !p.compress {
        return Way::Plain(None);
    }
    let why = if host_has_decoder {
        match ctx.release.compressed.get(&ctx.release.binary).await {
            Ok(c) => match c.pays() {
                Ok(()) => return Way::Compressed(c),
                Err(why) => why,
            },
            Err(e) => e,
        }
    } else {
        format!("the host has no `{}` to inflate it", DECODER[0])
    };
    tracing::info!(host = %ctx.host.name, "upload sent plain: {why}");
    Way::Plain(Some(why))
}

/// `sent 17.1MiB gzip (36%)`, or `sent plain: REASON`.
fn sent_words(s: &Sent) -> String {
    if s.encoding == PLAIN {
        return match &s.plain_because {
            Some(why) => format!("sent {PLAIN}: {why}"),
            None => format!("sent {PLAIN}"),
        };
    }
    format!(
        "sent {} {} ({}%)",
        ByteSize(s.sent_bytes),
        s.encoding,
        s.sent_bytes.saturating_mul(100) / s.file_bytes.max(1)
    )
}

/// The machine an ELF binary is built for, in `uname -m` words; `None`
/// for a file that is not ELF or a machine not listed (then only
/// `prover --version` on the host decides).
fn elf_machine(path: &std::path::Path) -> Option<&'static [&'static str]> {
    use std::io::Read;
    let mut head = [0u8; 20];
    std::fs::File::open(path).ok()?.read_exact(&mut head).ok()?;
    if &head[..4] != b"\x7fELF" {
        return None;
    }
    let machine = match head[5] {
        1 => u16::from_le_bytes([head[18], head[19]]),
        _ => u16::from_be_bytes([head[18], head[19]]),
    };
    Some(match machine {
        0x3e => &["x86_64", "amd64"],
        0xb7 => &["aarch64", "arm64"],
        0x03 => &["i386", "i486", "i586", "i686"],
        0x28 => &["armv7l", "armv6l", "armv8l", "arm"],
        0xf3 => &["riscv64"],
        0x15 => &["ppc64le", "ppc64"],
        0x16 => &["s390x"],
        _ => return None,
    })
}

/// A build for another architecture is refused before anything is sent:
/// the host would only say so through its shell reading the ELF as a
/// script (`Syntax error: ")" unexpected`), and after a drain.
async fn same_architecture(ctx: &StepCtx<'_>) -> Result<(), Cause> {
    let Some(built_for) = elf_machine(&ctx.release.binary) else {
        return Ok(());
    };
    let host = ctx.transport.run(&["uname", "-m"], QUICK).await?;
    let arch = host.stdout_text();
    if !host.success() || arch.is_empty() || built_for.contains(&arch.as_str()) {
        return Ok(());
    }
    Err(Cause::Check(format!(
        "{}: exec format error: {} is built for {} and the host runs {arch} (`uname -m`); nothing was uploaded; fix: {}",
        ctx.host.name,
        ctx.release.binary.display(),
        built_for[0],
        crate::transport::Failure::ExecFormat.fix()
    )))
}

/// The release's binary (an ELF of a known machine) starts on this host
/// (`prover --version`), checked here, before any later step drains the running daemon: a build for
/// another architecture fails now, as an exec format error, with the old
/// daemon still serving.
async fn runs_here(ctx: &StepCtx<'_>, dir: &str) -> Result<(), Cause> {
    if elf_machine(&ctx.release.binary).is_none() {
        // Not a native executable we know (a test's stand-in text, a
        // script): what it does with `--version` proves nothing.
        return Ok(());
    }
    let bin = q(&format!("{dir}/prover"))?;
    match ctx
        .transport
        .run_script_ok(&format!("{bin} --version"), QUICK)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) => {
            let arch = ctx
                .transport
                .run(&["uname", "-m"], QUICK)
                .await
                .map(|o| o.stdout_text())
                .unwrap_or_default();
            Err(Cause::Check(format!(
                "the uploaded binary does not start on this host ({arch}): `prover --version` failed: {e}"
            )))
        }
    }
}

/// Removes the temporary files of interrupted uploads from every release
/// folder (a killed upload of another build leaves them in that build's).
async fn sweep_temporaries(ctx: &StepCtx<'_>) -> Result<String, Cause> {
    let releases = q(&ctx.layout().releases())?;
    let script = format!(
        "cd {releases} 2>/dev/null || exit 0; for f in */.prover.*.tmp; do if [ -f \"$f\" ]; then rm -f -- \"$f\" && echo \"$f\"; fi; done; exit 0"
    );
    let out = ctx.transport.run_script_ok(&script, QUICK).await?;
    let n = out.stdout_text().lines().filter(|l| !l.is_empty()).count();
    Ok(if n == 0 {
        String::new()
    } else {
        format!("; removed {n} temporary file(s) of an interrupted upload")
    })
}

fn file_len(ctx: &StepCtx<'_>) -> u64 {
    std::fs::metadata(&ctx.release.binary)
        .map(|m| m.len())
        .unwrap_or(0)
}

/// True when both files are there with the right sums.
async fn present(
    ctx: &StepCtx<'_>,
    dir: &str,
    sha: &str,
    config_sha: Option<&str>,
) -> Result<bool, Cause> {
    let bin = q(&format!("{dir}/prover"))?;
    let cfg = q(&format!("{dir}/prover.toml"))?;
    let script = match config_sha {
        Some(_) => format!("if [ -f {bin} ] && [ -f {cfg} ]; then sha256sum {bin} {cfg}; fi"),
        None => format!("if [ -f {bin} ]; then sha256sum {bin}; fi"),
    };
    let out = ctx.transport.run_script_ok(&script, QUICK).await?;
    let sums = parse_sums(&out.stdout_text());
    Ok(match config_sha {
        Some(c) => sums.len() == 2 && sums[0] == sha && sums[1] == c,
        None => sums.len() == 1 && sums[0] == sha,
    })
}

fn parse_sums(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

fn cleanup_script(
    tmp_bin: &str,
    tmp_cfg: &str,
    dir: &str,
    dir_existed: bool,
) -> Result<String, Cause> {
    let mut s = format!("rm -f {} {}", q(tmp_bin)?, q(tmp_cfg)?);
    if !dir_existed {
        // Only a directory this step created goes, and only if it is empty.
        s.push_str(&format!("; rmdir {} 2>/dev/null; true", q(dir)?));
    }
    Ok(s)
}

fn corrupt_copy(binary: &std::path::Path) -> Result<tempfile::NamedTempFile, Cause> {
    let local = |source| Cause::Local {
        path: binary.to_owned(),
        source,
    };
    let mut bytes = std::fs::read(binary).map_err(local)?;
    let middle = bytes.len() / 2;
    if let Some(b) = bytes.get_mut(middle) {
        *b ^= 0x01;
    }
    let tmp = tempfile::NamedTempFile::new().map_err(local)?;
    std::fs::write(tmp.path(), &bytes).map_err(local)?;
    Ok(tmp)
}

fn disk_full_hint(cause: Cause) -> Cause {
    let text = cause.to_string();
    if text.contains("No space left on device") {
        Cause::Check(format!(
            "the host's disk is full (free space under the install dir and retry): {text}"
        ))
    } else {
        cause
    }
}

/// Deletes the oldest releases beyond `keep`, never `current`, the
/// recorded previous release, the one just uploaded, or the last ones that
/// passed verify (see below).
async fn prune(ctx: &StepCtx<'_>, keep: usize) -> Result<String, Cause> {
    let layout = ctx.layout();
    let listing = ctx
        .transport
        .run_script_ok(&format!("ls -1t {}", q(&layout.releases())?), QUICK)
        .await?;
    let current = remote::current_release(ctx).await?;
    let prev = ctx
        .transport
        .run_script_ok(
            &format!("cat {} 2>/dev/null || true", q(&layout.previous_file())?),
            QUICK,
        )
        .await?
        .stdout_text();
    // The rollback target (the newest release that passed verify other than
    // the new one and `current`) and the newest verified one are kept
    // whatever `keep` says: after failed builds they may be the oldest here,
    // and the only ones known to work.
    let verified = ctx
        .transport
        .run_script_ok(
            &format!("cat {} 2>/dev/null || true", q(&layout.verified_file())?),
            QUICK,
        )
        .await?
        .stdout_text();
    let verified: Vec<&str> = verified
        .lines()
        .map(str::trim)
        .filter(|l| is_release_id(l))
        .collect();
    let last_good = verified.last().map(|s| s.to_string());
    let target = verified
        .iter()
        .rev()
        .find(|v| **v != ctx.release.id && Some(**v) != current.as_deref())
        .map(|s| s.to_string());
    let protected = [
        Some(ctx.release.id.clone()),
        current,
        Some(prev),
        last_good,
        target,
    ];
    let mut doomed = Vec::new();
    for (i, name) in listing
        .stdout_text()
        .lines()
        .map(str::trim)
        .filter(|n| is_release_id(n))
        .enumerate()
    {
        let name = name.to_owned();
        if i >= keep && !protected.contains(&Some(name.clone())) {
            doomed.push(name);
        }
    }
    if doomed.is_empty() {
        return Ok(String::new());
    }
    let paths = doomed
        .iter()
        .map(|d| q(&layout.release(d)))
        .collect::<Result<Vec<_>, _>>()?
        .join(" ");
    ctx.transport
        .run_script_ok(&format!("rm -rf -- {paths}"), Duration::from_secs(60))
        .await?;
    Ok(format!("; pruned {} old release(s)", doomed.len()))
}

//! The local transport through [`super::Transport`], the way callers use it:
//! in a file of its own, since `local.rs` is imported by `transport`.

use crate::transport::{Transport, TransportError};
use std::time::{Duration, Instant};

fn local() -> Transport {
    Transport::Local(super::LocalTransport::new("here"))
}

#[tokio::test]
async fn argv_is_quoted_and_stdin_is_empty() {
    let t = local();
    let out = t
        .run(
            &["printf", "%s|", "a b", "$(echo no)", "it's"],
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "a b|$(echo no)|it's|"
    );
    // `cat` would hang forever on an inherited terminal or pipe.
    let out = t.run(&["cat"], Duration::from_secs(5)).await.unwrap();
    assert!(out.success() && out.stdout.is_empty());
}

#[tokio::test]
async fn deadline_kills_the_command() {
    let t = local();
    let start = Instant::now();
    let err = t
        .run(&["sleep", "30"], Duration::from_millis(500))
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
    assert!(start.elapsed() < Duration::from_secs(5));
    // The message says what happened; the command is for -vv only.
    assert!(err.to_string().starts_with("here: timeout: "), "{err}");
    assert!(!err.to_string().contains("sleep 30"), "{err}");
    assert_eq!(err.command().as_deref(), Some("sleep 30"));
}

#[tokio::test]
async fn upload_and_read_range_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.bin");
    let data: Vec<u8> = (0..700_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    let dst = dir.path().join("dst with space.bin");
    let t = local();
    t.upload(&src, dst.to_str().unwrap(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(std::fs::read(&dst).unwrap(), data);
    let part = t
        .read_range(dst.to_str().unwrap(), 1000, 50, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(part, &data[1000..1050]);
}

/// A stream inflated on the host lands as the original bytes; a corrupt one
/// fails the upload with the decoder's own words instead of writing
/// garbage that only the digest check would catch.
#[tokio::test]
async fn upload_through_a_decoder_inflates_and_a_corrupt_stream_fails() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 61) as u8).collect();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&data).unwrap();
    let mut stream = gz.finish().unwrap();
    let src = dir.path().join("src.gz");
    std::fs::write(&src, &stream).unwrap();
    let dst = dir.path().join("dst.bin");
    let t = local();
    let gunzip = ["gzip", "-dc"];
    t.upload_through(
        &src,
        &gunzip,
        dst.to_str().unwrap(),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(std::fs::read(&dst).unwrap(), data);

    let middle = stream.len() / 2;
    stream[middle] ^= 0x40;
    std::fs::write(&src, &stream).unwrap();
    let err = t
        .upload_through(
            &src,
            &gunzip,
            dst.to_str().unwrap(),
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::Failed { .. }), "{err}");
    assert!(err.to_string().contains("gzip"), "{err}");
}

#[tokio::test]
async fn a_failed_script_says_why_in_one_line_and_keeps_the_command_for_debugging() {
    let err = local()
        .run_script_ok("echo oops >&2; exit 3", Duration::from_secs(5))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with("here: remote command failed: oops (exit 3)"),
        "{msg}"
    );
    assert!(!msg.contains("echo"), "{msg}");
    assert_eq!(err.command().as_deref(), Some("echo oops >&2; exit 3"));
}

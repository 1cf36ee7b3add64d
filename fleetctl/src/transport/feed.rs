//! A local file into a command's stdin, the one copy loop both backends
//! upload through.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Upload chunk: large enough to keep the channel busy, small enough to bound memory.
const UPLOAD_CHUNK: usize = 256 * 1024;

/// Copies `input` into `stdin` and closes it. Only reading `input` can fail:
/// a write error means the command stopped reading (disk full, killed), and
/// its exit status, awaited next, says why.
pub(super) async fn feed<R, W>(mut input: R, mut stdin: W) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; UPLOAD_CHUNK];
    loop {
        let n = input.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        if stdin.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    // Dropping `stdin` closes it; the shutdown first flushes what a
    // buffering writer (an ssh channel) still holds.
    let _ = stdin.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn copies_every_chunk_and_stops_quietly_when_the_reader_goes() {
        let data: Vec<u8> = (0..UPLOAD_CHUNK * 2 + 7).map(|i| i as u8).collect();
        let mut out = Vec::new();
        feed(&data[..], &mut out).await.unwrap();
        assert_eq!(out, data);

        // A reader that takes 10 bytes then closes: the copy ends without error.
        let (mut reader, writer) = tokio::io::duplex(10);
        let copy =
            tokio::spawn(async move { feed(std::io::Cursor::new(vec![1u8; 4096]), writer).await });
        let mut got = [0u8; 10];
        reader.read_exact(&mut got).await.unwrap();
        drop(reader);
        copy.await.unwrap().unwrap();
        assert_eq!(got, [1u8; 10]);
    }
}

//! Unit tests of the output log.

use std::path::Path;

use super::*;

fn limits(memory_bytes: usize, cap_bytes: u64, tail_bytes: u64) -> LogLimits {
    LogLimits {
        memory_bytes,
        cap_bytes,
        tail_bytes,
    }
}

fn log(dir: &Path, memory_bytes: usize, cap_bytes: u64) -> OutputLog {
    OutputLog::new(
        dir.join("c"),
        limits(memory_bytes, cap_bytes, cap_bytes / 2),
    )
}

fn files(dir: &Path) -> usize {
    std::fs::read_dir(dir).expect("dir").count()
}

/// Writes a deterministic mix of stdout and stderr chunks; returns the bytes written.
fn fill(log: &mut OutputLog, n: usize) -> Vec<(Stream, u8)> {
    let mut expected = Vec::new();
    for i in 0..n {
        let stream = if i % 3 == 0 {
            Stream::Stderr
        } else {
            Stream::Stdout
        };
        let len = 1 + (i * 37) % 700;
        let data: Vec<u8> = (0..len).map(|j| ((i * 31 + j) % 256) as u8).collect();
        let taken = log.append(stream, &data);
        assert_eq!(taken, len);
        expected.extend(data.iter().map(|&b| (stream, b)));
    }
    expected
}

/// Bytes with their stream, and the `(offset, len)` gaps met.
type ReadBack = (Vec<(Stream, u8)>, Vec<(u64, u64)>);

/// Reads from `offset` to the end; returns the bytes and the gaps met.
fn read_all(log: &OutputLog, offset: u64, max: usize) -> ReadBack {
    let mut r = LogReader::new(log, offset);
    let mut out = Vec::new();
    let mut gaps = Vec::new();
    let mut at = offset.min(log.total());
    while let Some(c) = r.next_blocking(log, max).expect("read") {
        match c {
            Ok(c) => {
                assert_eq!(c.offset, at);
                assert!(!c.data.is_empty() && c.data.len() <= max);
                at += c.data.len() as u64;
                out.extend(c.data.iter().map(|&b| (c.stream, b)));
            }
            Err((offset, len)) => {
                assert_eq!(offset, at);
                at += len;
                gaps.push((offset, len));
            }
        }
    }
    assert_eq!(at, log.total());
    (out, gaps)
}

#[test]
fn memory_only_reads_from_every_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut l = log(dir.path(), 1 << 20, 1 << 30);
    let expected = fill(&mut l, 60);
    assert_eq!(files(dir.path()), 0);
    assert_eq!(l.total(), expected.len() as u64);
    for off in (0..expected.len()).step_by(97) {
        assert_eq!(read_all(&l, off as u64, 1000).0, expected[off..]);
    }
}

#[test]
fn spilled_reads_are_exact_from_every_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut l = log(dir.path(), 2000, 1 << 30);
    let expected = fill(&mut l, 400);
    assert!(files(dir.path()) > 0);
    assert!(l.mem_start > 0 && l.mem_start < l.total());
    for off in (0..expected.len())
        .step_by(1013)
        .chain([expected.len() - 1])
    {
        assert_eq!(
            read_all(&l, off as u64, 777).0,
            expected[off..],
            "offset {off}"
        );
    }
    assert_eq!(read_all(&l, 0, 1 << 20).0, expected);
    // Past the end: starts at the end.
    assert!(read_all(&l, u64::MAX, 100).0.is_empty());
}

#[test]
fn index_is_sparse_and_large_logs_read_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut l = log(dir.path(), 4096, 1 << 30);
    let chunk: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
    for _ in 0..64 {
        l.append(Stream::Stdout, &chunk);
    }
    let indexed: usize = l.segments.iter().map(|s| s.index.len()).sum();
    assert!(indexed <= (l.total() / INDEX_STRIDE + 2) as usize);
    let off = 3 * 65536 + 12345;
    let mut r = LogReader::new(&l, off);
    let c = r
        .next_blocking(&l, 10)
        .expect("read")
        .expect("chunk")
        .expect("bytes");
    assert_eq!(c.offset, off);
    assert_eq!(c.data, chunk[12345..12355]);
}

#[test]
fn a_long_output_keeps_head_and_tail_with_exact_offsets() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Head 600 bytes, tail 400 bytes, 100 bytes in memory: segments of 64 KiB at least,
    // so use a larger tail to see segments roll.
    let mut l = OutputLog::new(dir.path().join("c"), limits(100, 1000, 400));
    let expected = fill(&mut l, 50);
    let total = expected.len() as u64;
    assert_eq!(l.total(), total);
    assert!(total > 1000);
    assert!(l.truncated());
    assert_eq!(l.gap(), Some((600, total - 400)));
    let (got, gaps) = read_all(&l, 0, 64);
    assert_eq!(gaps, vec![(600, total - 1000)]);
    let mut want = expected[..600].to_vec();
    want.extend_from_slice(&expected[(total - 400) as usize..]);
    assert_eq!(got, want);
    // From inside the gap: the gap's rest, then the tail.
    let (got, gaps) = read_all(&l, 700, 1 << 20);
    assert_eq!(gaps, vec![(700, total - 400 - 700)]);
    assert_eq!(got, expected[(total - 400) as usize..]);
    // From inside the tail: exact.
    let (got, gaps) = read_all(&l, total - 10, 3);
    assert!(gaps.is_empty());
    assert_eq!(got, expected[(total - 10) as usize..]);
}

#[test]
fn tail_segments_roll_and_disk_stays_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tail = 256 * 1024;
    let mut l = OutputLog::new(dir.path().join("c"), limits(16 * 1024, 512 * 1024, tail));
    let chunk: Vec<u8> = (0..10_000u32).map(|i| (i % 253) as u8).collect();
    let mut all = Vec::new();
    for i in 0..500u32 {
        let mut c = chunk.clone();
        c[0] = (i % 256) as u8;
        l.append(Stream::Stdout, &c);
        all.extend_from_slice(&c);
    }
    let total = all.len() as u64;
    let on_disk: u64 = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").metadata().expect("meta").len())
        .sum();
    assert!(
        on_disk <= 512 * 1024 + l.limits.segment_bytes() + 64 * 1024,
        "{on_disk} bytes on disk"
    );
    let (got, gaps) = read_all(&l, 0, 100_000);
    assert_eq!(gaps, vec![(256 * 1024, total - 512 * 1024)]);
    let got: Vec<u8> = got.into_iter().map(|(_, b)| b).collect();
    let mut want = all[..256 * 1024].to_vec();
    want.extend_from_slice(&all[(total - tail) as usize..]);
    assert_eq!(got, want);
    l.close();
    l.remove_spill_file();
    assert_eq!(files(dir.path()), 0);
}

#[test]
fn a_reader_that_keeps_up_gets_every_byte() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut l = OutputLog::new(dir.path().join("c"), limits(100, 1000, 400));
    let mut r = LogReader::new(&l, 0);
    let mut got = Vec::new();
    let mut want = Vec::new();
    for i in 0..200u32 {
        let data = vec![(i % 256) as u8; 37];
        l.append(Stream::Stdout, &data);
        want.extend_from_slice(&data);
        while let Some(c) = r.next_blocking(&l, 1000).expect("read") {
            got.extend_from_slice(&c.expect("no gap").data);
        }
    }
    assert_eq!(got, want);
}

#[test]
fn close_spills_large_memory_and_stops_appends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut l = log(dir.path(), 1 << 20, 1 << 30);
    l.append(Stream::Stdout, &vec![7u8; KEEP_AFTER_CLOSE + 1]);
    l.close();
    assert_eq!(l.mem_bytes, 0);
    assert_eq!(l.append(Stream::Stdout, b"late"), 0);
    assert_eq!(read_all(&l, 0, 1 << 20).0.len(), KEEP_AFTER_CLOSE + 1);
    l.remove_spill_file();
    assert_eq!(files(dir.path()), 0);
}

#[test]
fn failed_spill_stops_storing_but_keeps_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut l = OutputLog::new(dir.path().join("missing/c"), limits(10, 1 << 30, 1 << 29));
    assert_eq!(l.append(Stream::Stdout, b"0123456789abcdef"), 16);
    assert!(l.truncated());
    assert_eq!(l.append(Stream::Stdout, b"more"), 0);
    assert_eq!(read_all(&l, 0, 100).0.len(), 16);
}

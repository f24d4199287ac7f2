//! Frame transport over real socketpairs: every frame round-trips, and malformed input (oversized,
//! truncated, wrong version) is an error rather than an allocation or a hang.

use std::time::Duration;

use respgw_ipc::{
    Frame, FrameReader, FrameWriter, IpcError, MAX_FRAME_LEN, PROTOCOL_VERSION, encode_frame, into_frame_halves,
    into_tokio, socketpair,
};
use respgw_telemetry::{Metrics, MetricsSnapshot, ToolType};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::time::timeout;

const PATIENCE: Duration = Duration::from_secs(10);

fn sample_snapshot() -> MetricsSnapshot {
    let metrics = Metrics::new();
    metrics.record_request("POST", "/v1/responses", 200, Duration::from_millis(12));
    metrics.tool_executed(ToolType::new("mcp"), Duration::from_secs(2), false);
    metrics.mcp_server_startup("label \"with\" quotes", true);
    let _stream = metrics.sse_stream("/v1/responses");
    metrics.snapshot()
}

fn every_frame() -> Vec<Frame> {
    vec![
        Frame::Ready { pid: std::process::id() },
        Frame::Metrics(sample_snapshot()),
        Frame::Metrics(MetricsSnapshot::default()),
        Frame::ScrapeRequest { id: u64::MAX },
        Frame::ScrapeReply { id: 7, snapshot: sample_snapshot() },
        Frame::Shutdown,
    ]
}

fn tokio_pair() -> (UnixStream, UnixStream) {
    let (first, second) = socketpair().expect("socketpair");
    (into_tokio(first).expect("tokio first"), into_tokio(second).expect("tokio second"))
}

async fn read(reader: &mut FrameReader<impl tokio::io::AsyncRead + Unpin>) -> Result<Option<Frame>, IpcError> {
    timeout(PATIENCE, reader.read_frame()).await.expect("read_frame hung")
}

#[tokio::test]
async fn every_frame_roundtrips_both_ways_then_clean_eof() {
    let (supervisor_end, worker_end) = tokio_pair();
    let (mut supervisor_reader, mut supervisor_writer) = into_frame_halves(supervisor_end);
    let (mut worker_reader, mut worker_writer) = into_frame_halves(worker_end);

    for frame in every_frame() {
        worker_writer.write_frame(&frame).await.expect("worker write");
        supervisor_writer.write_frame(&frame).await.expect("supervisor write");
    }
    for frame in every_frame() {
        assert_eq!(read(&mut supervisor_reader).await.expect("supervisor read"), Some(frame.clone()));
        assert_eq!(read(&mut worker_reader).await.expect("worker read"), Some(frame));
    }

    worker_writer.shutdown().await.expect("shutdown");
    assert!(read(&mut supervisor_reader).await.expect("clean eof").is_none());
    drop(supervisor_writer);
    drop(supervisor_reader);
    assert!(read(&mut worker_reader).await.expect("clean eof").is_none());
}

#[tokio::test]
async fn frames_survive_tiny_reads_and_writes() {
    let (client, server) = tokio::io::duplex(3);
    let mut writer = FrameWriter::new(client);
    let mut reader = FrameReader::new(server);
    let sender = tokio::spawn(async move {
        for frame in every_frame() {
            writer.write_frame(&frame).await.expect("write");
        }
    });
    for frame in every_frame() {
        assert_eq!(read(&mut reader).await.expect("read"), Some(frame));
    }
    sender.await.expect("sender");
    assert!(read(&mut reader).await.expect("eof").is_none());
}

#[tokio::test]
async fn read_frame_is_cancel_safe() {
    let (mut raw_writer, reader_end) = tokio_pair();
    let mut reader = FrameReader::new(reader_end);
    let bytes = encode_frame(&Frame::ScrapeReply { id: 9, snapshot: sample_snapshot() }).expect("encode");
    let (head, tail) = bytes.split_at(bytes.len() / 2);
    raw_writer.write_all(head).await.expect("head");
    // The read is cancelled while half the frame is buffered ...
    assert!(timeout(Duration::from_millis(50), reader.read_frame()).await.is_err());
    raw_writer.write_all(tail).await.expect("tail");
    // ... and the next call still returns the whole frame.
    assert_eq!(read(&mut reader).await.expect("read"), Some(Frame::ScrapeReply { id: 9, snapshot: sample_snapshot() }));
}

#[tokio::test]
async fn clean_eof_before_any_frame_is_none() {
    let (writer_end, reader_end) = tokio_pair();
    drop(writer_end);
    let mut reader = FrameReader::new(reader_end);
    assert!(read(&mut reader).await.expect("eof").is_none());
}

#[tokio::test]
async fn oversized_length_prefix_is_rejected_before_the_body() {
    for announced in [MAX_FRAME_LEN as u32 + 1, u32::MAX] {
        let (mut raw_writer, reader_end) = tokio_pair();
        raw_writer.write_all(&announced.to_le_bytes()).await.expect("prefix");
        raw_writer.write_all(&[PROTOCOL_VERSION, 0]).await.expect("some body");
        let mut reader = FrameReader::new(reader_end);
        match read(&mut reader).await {
            Err(IpcError::FrameTooLarge { len, max }) => assert_eq!((len, max), (announced as usize, MAX_FRAME_LEN)),
            other => panic!("expected FrameTooLarge, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn zero_length_prefix_is_rejected() {
    let (mut raw_writer, reader_end) = tokio_pair();
    raw_writer.write_all(&0u32.to_le_bytes()).await.expect("prefix");
    let mut reader = FrameReader::new(reader_end);
    assert!(matches!(read(&mut reader).await, Err(IpcError::EmptyFrame)));
}

#[tokio::test]
async fn truncated_frame_is_an_error() {
    let bytes = encode_frame(&Frame::Metrics(sample_snapshot())).expect("encode");
    let (mut raw_writer, reader_end) = tokio_pair();
    raw_writer.write_all(&bytes[..bytes.len() - 1]).await.expect("partial frame");
    drop(raw_writer);
    let mut reader = FrameReader::new(reader_end);
    match read(&mut reader).await {
        Err(IpcError::Truncated { received, expected }) => {
            assert_eq!((received, expected), (bytes.len() - 1, bytes.len()))
        }
        other => panic!("expected Truncated, got {other:?}"),
    }
}

#[tokio::test]
async fn truncated_length_prefix_is_an_error() {
    let (mut raw_writer, reader_end) = tokio_pair();
    raw_writer.write_all(&[5, 0]).await.expect("half a prefix");
    drop(raw_writer);
    let mut reader = FrameReader::new(reader_end);
    assert!(matches!(read(&mut reader).await, Err(IpcError::Truncated { received: 2, expected: 4 })));
}

#[tokio::test]
async fn foreign_version_is_reported_and_the_stream_continues() {
    let mut foreign = encode_frame(&Frame::Shutdown).expect("encode");
    foreign[4] = PROTOCOL_VERSION.wrapping_add(1);
    let (mut raw_writer, reader_end) = tokio_pair();
    raw_writer.write_all(&foreign).await.expect("foreign frame");
    raw_writer.write_all(&encode_frame(&Frame::Ready { pid: 1 }).expect("encode")).await.expect("good frame");
    let mut reader = FrameReader::new(reader_end);
    assert!(matches!(read(&mut reader).await, Err(IpcError::VersionMismatch { .. })));
    assert_eq!(read(&mut reader).await.expect("next frame"), Some(Frame::Ready { pid: 1 }));
}

#[tokio::test]
async fn writer_refuses_frames_over_the_limit() {
    let metrics = Metrics::new();
    metrics.mcp_server_startup(&"x".repeat(MAX_FRAME_LEN), true);
    let (writer_end, reader_end) = tokio_pair();
    let mut writer = FrameWriter::new(writer_end);
    let result = writer.write_frame(&Frame::Metrics(metrics.snapshot())).await;
    assert!(matches!(result, Err(IpcError::FrameTooLarge { .. })), "{result:?}");
    // Nothing reached the socket: the peer sees a clean end of stream.
    drop(writer);
    let mut reader = FrameReader::new(reader_end);
    assert!(read(&mut reader).await.expect("eof").is_none());
}

//! The frames exchanged between supervisor and worker, and their byte encoding.

use respgw_telemetry::{MetricsSnapshot, OverviewHistory};
use serde::{Deserialize, Serialize};

use crate::error::IpcError;

/// Version byte carried at the start of every frame body.
///
/// Supervisor and workers are normally the same binary, but a worker restarted after the binary
/// was replaced on disk runs the new code against the old supervisor. A per-frame version byte
/// (rather than a one-off handshake) costs one byte, needs no connection state, and turns such a
/// mismatch into a clear [`IpcError::VersionMismatch`] instead of a garbled decode.
///
/// Bump it on any change to [`Frame`] or to the telemetry snapshot types other than appending a
/// new variant at the end of [`Frame`].
pub const PROTOCOL_VERSION: u8 = 1;

/// Largest accepted frame body (version byte + postcard bytes): 16 MiB.
pub const MAX_FRAME_LEN: usize = 16 * 1024 * 1024;

/// Length of the little-endian `u32` prefix.
pub(crate) const LENGTH_PREFIX_LEN: usize = 4;

/// One message between supervisor and worker. Variant order is part of the wire format
/// (postcard encodes the variant index): append, never reorder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Frame {
    /// Worker → supervisor, once, when the worker is serving.
    Ready {
        /// The worker's process id.
        pid: u32,
    },
    /// Worker → supervisor, periodically (and once more while draining): the worker's own metrics.
    Metrics(MetricsSnapshot),
    /// Worker → supervisor: a `/metrics` scrape on this worker wants the merged view.
    ScrapeRequest {
        /// Correlates the reply; unique per worker connection.
        id: u64,
    },
    /// Supervisor → worker: the merged view for the scrape `id`.
    ScrapeReply {
        /// The [`Frame::ScrapeRequest`] id this answers.
        id: u64,
        /// Merged metrics of all workers.
        snapshot: MetricsSnapshot,
    },
    /// Supervisor → worker: stop accepting, drain, exit.
    Shutdown,
    /// Worker → supervisor: `GET /v1/console/overview` on this worker wants the sampled history.
    OverviewRequest {
        /// Correlates the reply; unique per worker connection.
        id: u64,
    },
    /// Supervisor → worker: the overview history for the request `id`.
    OverviewReply {
        /// The [`Frame::OverviewRequest`] id this answers.
        id: u64,
        /// The last hour of samples of the merged metrics.
        history: OverviewHistory,
    },
}

/// Encodes `frame` with its length prefix and version byte, ready to write to the socket.
pub fn encode_frame(frame: &Frame) -> Result<Vec<u8>, IpcError> {
    let mut bytes = Vec::with_capacity(64);
    encode_frame_into(frame, &mut bytes)?;
    Ok(bytes)
}

/// Appends the encoding of `frame` (prefix, version, body) to `out`, which must be empty.
pub(crate) fn encode_frame_into(frame: &Frame, out: &mut Vec<u8>) -> Result<(), IpcError> {
    out.clear();
    out.extend_from_slice(&[0; LENGTH_PREFIX_LEN]);
    out.push(PROTOCOL_VERSION);
    let encoded = postcard::to_extend(frame, std::mem::take(out)).map_err(IpcError::Encode)?;
    *out = encoded;
    let body_len = out.len() - LENGTH_PREFIX_LEN;
    let too_large = IpcError::FrameTooLarge { len: body_len, max: MAX_FRAME_LEN };
    if body_len > MAX_FRAME_LEN {
        return Err(too_large);
    }
    let prefix = u32::try_from(body_len).map_err(|_| too_large)?;
    out[..LENGTH_PREFIX_LEN].copy_from_slice(&prefix.to_le_bytes());
    Ok(())
}

/// Decodes a frame body (everything after the length prefix: version byte + postcard bytes).
pub fn decode_frame_body(body: &[u8]) -> Result<Frame, IpcError> {
    let Some((&version, postcard_bytes)) = body.split_first() else {
        return Err(IpcError::EmptyFrame);
    };
    if version != PROTOCOL_VERSION {
        return Err(IpcError::VersionMismatch { received: version, expected: PROTOCOL_VERSION });
    }
    let (frame, rest) =
        postcard::take_from_bytes::<Frame>(postcard_bytes).map_err(|error| IpcError::Decode(error.to_string()))?;
    if !rest.is_empty() {
        return Err(IpcError::Decode(format!("{} trailing bytes after the frame", rest.len())));
    }
    Ok(frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_is_prefix_version_postcard() {
        let bytes = encode_frame(&Frame::Ready { pid: 300 }).expect("encode");
        // body = version 1, variant 0, varint(300) = [0xac, 0x02]
        assert_eq!(bytes, [4, 0, 0, 0, PROTOCOL_VERSION, 0, 0xac, 0x02]);
        assert_eq!(decode_frame_body(&bytes[4..]).expect("decode"), Frame::Ready { pid: 300 });
    }

    #[test]
    fn overview_frames_round_trip_after_the_older_variants() {
        let metrics = respgw_telemetry::Metrics::new();
        metrics.tenant_request("alpha", 200);
        let mut history = OverviewHistory::new(10);
        history.record(1_700_000_000, &metrics.snapshot());
        history.record(1_700_000_010, &metrics.snapshot());
        for frame in [Frame::OverviewRequest { id: 7 }, Frame::OverviewReply { id: 7, history }] {
            let bytes = encode_frame(&frame).expect("encode");
            assert_eq!(decode_frame_body(&bytes[4..]).expect("decode"), frame);
        }
        // Appended, so the variants workers already know keep their indexes: Shutdown is 4.
        let request = encode_frame(&Frame::OverviewRequest { id: 1 }).expect("encode");
        assert_eq!(request[5], 5);
        assert_eq!(encode_frame(&Frame::Shutdown).expect("encode")[5], 4);
    }

    #[test]
    fn wrong_version_and_trailing_bytes_are_rejected() {
        let mut bytes = encode_frame(&Frame::Shutdown).expect("encode");
        bytes[4] = PROTOCOL_VERSION + 1;
        assert!(matches!(decode_frame_body(&bytes[4..]), Err(IpcError::VersionMismatch { received: 2, expected: 1 })));
        bytes[4] = PROTOCOL_VERSION;
        bytes.push(0);
        assert!(matches!(decode_frame_body(&bytes[4..]), Err(IpcError::Decode(_))));
        assert!(matches!(decode_frame_body(&[]), Err(IpcError::EmptyFrame)));
        assert!(matches!(decode_frame_body(&[PROTOCOL_VERSION, 99]), Err(IpcError::Decode(_))));
    }
}

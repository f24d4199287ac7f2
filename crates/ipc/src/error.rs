//! The one error type of the IPC layer.

use std::io;

/// Why a frame could not be read or written. After any error other than
/// [`IpcError::VersionMismatch`] or [`IpcError::Decode`] the connection is unusable and should be
/// dropped (after those two the offending frame has been consumed).
#[derive(Debug, thiserror::Error)]
pub enum IpcError {
    /// The socket failed.
    #[error("ipc socket error: {0}")]
    Io(#[from] io::Error),
    /// A length prefix (read) or an encoded frame (write) exceeds [`crate::MAX_FRAME_LEN`].
    #[error("ipc frame of {len} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge {
        /// Announced or encoded length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A length prefix of zero: not even the version byte.
    #[error("empty ipc frame (length prefix 0)")]
    EmptyFrame,
    /// The peer closed the connection in the middle of a frame.
    #[error("ipc connection closed mid-frame after {received} of {expected} bytes")]
    Truncated {
        /// Bytes of the frame (including its length prefix) received.
        received: usize,
        /// Bytes the frame needed (4 while the prefix itself is incomplete).
        expected: usize,
    },
    /// The peer is a binary speaking another protocol version (e.g. after an upgrade on disk).
    #[error("peer speaks ipc protocol version {received}, this binary speaks version {expected}")]
    VersionMismatch {
        /// Version byte found in the frame.
        received: u8,
        /// [`crate::PROTOCOL_VERSION`].
        expected: u8,
    },
    /// The frame body is not a valid postcard [`crate::Frame`] (or has trailing bytes).
    #[error("malformed ipc frame: {0}")]
    Decode(String),
    /// The frame could not be serialised.
    #[error("cannot encode ipc frame: {0}")]
    Encode(postcard::Error),
}

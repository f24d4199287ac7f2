//! Async frame reading and writing over any tokio byte stream (in practice the halves of a Unix
//! socket).

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::IpcError;
use crate::frame::{Frame, LENGTH_PREFIX_LEN, MAX_FRAME_LEN, decode_frame_body, encode_frame_into};

/// Initial read buffer size; metrics snapshots are typically a few KiB.
const INITIAL_BUFFER_CAPACITY: usize = 8 * 1024;

/// Reads length-prefixed [`Frame`]s from `R`.
#[derive(Debug)]
pub struct FrameReader<R> {
    reader: R,
    /// Bytes received but not yet returned as frames (may hold the start of the next frame).
    buffer: Vec<u8>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Wraps `reader`.
    pub fn new(reader: R) -> Self {
        FrameReader { reader, buffer: Vec::with_capacity(INITIAL_BUFFER_CAPACITY) }
    }

    /// Reads the next frame. `Ok(None)` means the peer closed the connection cleanly between
    /// frames; a close in the middle of a frame is [`IpcError::Truncated`].
    ///
    /// Cancel safe: partially received frames stay buffered in `self`, so this can be used as a
    /// `tokio::select!` branch and called again.
    pub async fn read_frame(&mut self) -> Result<Option<Frame>, IpcError> {
        loop {
            if let Some(body_len) = self.buffered_frame_len()? {
                let frame_end = LENGTH_PREFIX_LEN + body_len;
                let decoded = decode_frame_body(&self.buffer[LENGTH_PREFIX_LEN..frame_end]);
                self.buffer.drain(..frame_end);
                if self.buffer.capacity() > 4 * INITIAL_BUFFER_CAPACITY && self.buffer.len() < INITIAL_BUFFER_CAPACITY {
                    self.buffer.shrink_to(INITIAL_BUFFER_CAPACITY);
                }
                return decoded.map(Some);
            }
            let received = self.reader.read_buf(&mut self.buffer).await?;
            if received == 0 {
                return match self.buffer.len() {
                    0 => Ok(None),
                    received => Err(IpcError::Truncated { received, expected: self.expected_len() }),
                };
            }
        }
    }

    /// The wrapped reader.
    pub fn into_inner(self) -> R {
        self.reader
    }

    /// Checks the length prefix as soon as it is buffered. Returns the body length once the
    /// whole frame is buffered; otherwise reserves room for the rest (bounded by the limit) and
    /// returns `None`.
    fn buffered_frame_len(&mut self) -> Result<Option<usize>, IpcError> {
        let Some(prefix) = self.buffer.first_chunk::<LENGTH_PREFIX_LEN>() else {
            return Ok(None);
        };
        let body_len = usize::try_from(u32::from_le_bytes(*prefix)).unwrap_or(usize::MAX);
        if body_len == 0 {
            return Err(IpcError::EmptyFrame);
        }
        if body_len > MAX_FRAME_LEN {
            return Err(IpcError::FrameTooLarge { len: body_len, max: MAX_FRAME_LEN });
        }
        let frame_len = LENGTH_PREFIX_LEN + body_len;
        if self.buffer.len() >= frame_len {
            return Ok(Some(body_len));
        }
        self.buffer.reserve(frame_len - self.buffer.len());
        Ok(None)
    }

    /// Bytes the frame at the head of the buffer needs in total (4 while its prefix is incomplete).
    fn expected_len(&self) -> usize {
        match self.buffer.first_chunk::<LENGTH_PREFIX_LEN>() {
            Some(prefix) => LENGTH_PREFIX_LEN + u32::from_le_bytes(*prefix) as usize,
            None => LENGTH_PREFIX_LEN,
        }
    }
}

/// Writes length-prefixed [`Frame`]s to `W`.
#[derive(Debug)]
pub struct FrameWriter<W> {
    writer: W,
    /// Reused encoding buffer.
    buffer: Vec<u8>,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    /// Wraps `writer`.
    pub fn new(writer: W) -> Self {
        FrameWriter { writer, buffer: Vec::new() }
    }

    /// Encodes `frame`, writes it whole and flushes. A frame whose body would exceed
    /// [`MAX_FRAME_LEN`] is refused with [`IpcError::FrameTooLarge`] before anything is written.
    ///
    /// Not cancel safe: dropping the future mid-write can leave half a frame on the socket, after
    /// which the connection must be dropped. Send from one task (e.g. behind an mpsc channel).
    pub async fn write_frame(&mut self, frame: &Frame) -> Result<(), IpcError> {
        encode_frame_into(frame, &mut self.buffer)?;
        self.writer.write_all(&self.buffer).await?;
        self.writer.flush().await?;
        if self.buffer.capacity() > 4 * INITIAL_BUFFER_CAPACITY {
            self.buffer = Vec::new();
        }
        Ok(())
    }

    /// Shuts the write direction down, so the peer's reader sees a clean end of stream.
    pub async fn shutdown(&mut self) -> Result<(), IpcError> {
        self.writer.shutdown().await?;
        Ok(())
    }

    /// The wrapped writer.
    pub fn into_inner(self) -> W {
        self.writer
    }
}

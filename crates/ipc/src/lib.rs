//! Supervisor ⇄ worker IPC for respgw's standalone mode.
//!
//! Each worker gets one end of a Unix socketpair ([`socketpair`]); the supervisor passes it across
//! the worker's re-exec ([`inherit_in_child`] sets [`IPC_FD_ENV`] and clears `FD_CLOEXEC` in the
//! child only) and the worker adopts it ([`inherited_from_env`] / [`from_inherited_fd`]).
//! Over it both sides exchange [`Frame`]s: ready, periodic metrics snapshots, scrape requests and
//! replies, shutdown.
//!
//! Wire format of one frame: `u32` little-endian length `N`, then `N` bytes: one protocol version
//! byte ([`PROTOCOL_VERSION`]) followed by the postcard encoding of the [`Frame`]. `N` is at most
//! [`MAX_FRAME_LEN`]; a larger prefix is rejected before anything is allocated.

mod error;
mod fd;
mod frame;
mod stream;

pub use error::IpcError;
pub use fd::{
    IPC_FD_ENV, clear_cloexec, from_inherited_fd, inherit_in_child, inherited_from_env, into_frame_halves, into_tokio,
    socketpair,
};
pub use frame::{Frame, MAX_FRAME_LEN, PROTOCOL_VERSION, decode_frame_body, encode_frame};
pub use stream::{FrameReader, FrameWriter};

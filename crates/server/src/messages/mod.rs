//! (filled in by its owner: the `/v1/messages` handlers)

pub(crate) mod reply;

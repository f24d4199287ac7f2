//! systemd readiness notifications (`Type=notify`): `READY=1` once every worker serves,
//! `STOPPING=1` when draining starts. A no-op when not started by systemd.

/// Tell systemd the service is ready.
pub fn ready() {
    send(&[sd_notify::NotifyState::Ready]);
}

/// Tell systemd the service is stopping.
pub fn stopping() {
    send(&[sd_notify::NotifyState::Stopping]);
}

fn send(states: &[sd_notify::NotifyState]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "could not notify systemd");
    }
}

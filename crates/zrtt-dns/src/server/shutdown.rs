//! A shutdown signal (a watch channel), so callers need no extra crate.

/// Fires once; every clone sees it.
#[derive(Clone, Debug)]
pub struct Shutdown(tokio::sync::watch::Receiver<bool>);

/// Triggers a [`Shutdown`].
#[derive(Debug)]
pub struct Trigger(tokio::sync::watch::Sender<bool>);

/// A connected pair.
pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = tokio::sync::watch::channel(false);
    (Trigger(tx), Shutdown(rx))
}

impl Trigger {
    /// Fire.
    pub fn fire(&self) {
        let _ = self.0.send(true);
    }
}

impl Shutdown {
    /// Resolves when fired (or when the trigger is dropped).
    pub async fn wait(&self) {
        let mut rx = self.0.clone();
        let _ = rx.wait_for(|v| *v).await;
    }
}

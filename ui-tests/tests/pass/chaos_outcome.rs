//! `#[chaos(PetChaos, outcome = ..)]` on a free fn and a method, under a
//! retry: the futures stay `Send`.
use resilient_core::{chaos, retryable, ChaosSpec};
use ui_tests::{UiError, UiRetry};

#[derive(ChaosSpec)]
#[spec("ui.chaos.pet")]
pub struct PetChaos;

fn unavailable() -> Result<u64, UiError> {
    Ok(0)
}

#[retryable(UiRetry)]
#[chaos(PetChaos, outcome = unavailable)]
pub async fn find(id: u64) -> Result<u64, UiError> {
    Ok(id)
}

pub struct Client;

impl Client {
    fn down(&self) -> Result<u64, UiError> {
        Ok(0)
    }

    fn unavailable() -> Result<u64, UiError> {
        Ok(0)
    }

    #[chaos(PetChaos, outcome = Self::unavailable)]
    pub async fn get(&self, id: u64) -> Result<u64, UiError> {
        let _ = self.down();
        Ok(id)
    }
}

fn send<T: Send>(_: T) {}

fn main() {
    send(find(1));
    send(Client.get(1));
}

//! A `&mut self` method cannot share its receiver with a method fallback.
use resilient_core::fallback;
use ui_tests::UiError;

pub struct Counter {
    n: u64,
}

impl Counter {
    #[fallback(method = "zero()")]
    pub async fn bump(&mut self) -> Result<u64, UiError> {
        self.n += 1;
        Ok(self.n)
    }

    fn zero(&mut self) -> Result<u64, UiError> {
        Ok(0)
    }
}

fn main() {}

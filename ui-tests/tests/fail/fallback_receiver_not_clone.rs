//! A method fallback on an owned, non-`Clone` receiver: the fallback would
//! need a clone of `self`.
use resilient_core::fallback;
use ui_tests::UiError;

pub struct Owned;

impl Owned {
    #[fallback(method = "cached()")]
    pub async fn find(self) -> Result<u64, UiError> {
        Ok(1)
    }

    fn cached(self) -> Result<u64, UiError> {
        Ok(2)
    }
}

fn main() {}

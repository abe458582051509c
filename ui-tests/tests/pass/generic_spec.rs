// A spec named by a generic parameter, of the fn or of its impl: the
// attribute records no use of it (a record is an item, which cannot name
// an outer generic parameter), and the fn compiles as before.
use std::marker::PhantomData;

use resilient_core::{circuit_breakable, CircuitBreakerSpec, Classify, Error};

#[derive(Debug)]
pub struct Failed;

impl From<Error> for Failed {
    fn from(_: Error) -> Self {
        Failed
    }
}

pub struct Client<S>(PhantomData<S>);

impl<S: CircuitBreakerSpec> Client<S>
where
    S::Classifier: Classify<u32, Failed>,
{
    #[circuit_breakable(S)]
    pub async fn find(&self) -> Result<u32, Failed> {
        Ok(1)
    }
}

#[circuit_breakable(Spec)]
pub async fn find<Spec: CircuitBreakerSpec>() -> Result<u32, Failed>
where
    Spec::Classifier: Classify<u32, Failed>,
{
    Ok(1)
}

fn main() {}

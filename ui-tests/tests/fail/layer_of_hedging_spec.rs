// A hedging spec has no tower layer: the error says so and what to use.
use resilient_core::layer::Layered;
use resilient_core::HedgingSpec;
use tower::{service_fn, ServiceBuilder};

#[derive(HedgingSpec)]
#[spec("ui.hedging.tower")]
pub struct PetHedging;

async fn find(id: u64) -> Result<String, resilient_core::BoxError> {
    Ok(format!("pet {id}"))
}

fn main() {
    let _pets = ServiceBuilder::new()
        .layer(PetHedging::layer())
        .service(service_fn(find));
}

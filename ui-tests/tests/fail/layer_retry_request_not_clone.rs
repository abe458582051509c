// A retry layer keeps the request to send it again: a request that is not
// `Clone` is refused where the layer is applied.
use resilient_core::layer::Layered;
use resilient_core::RetrySpec;
use tower::{service_fn, ServiceBuilder, ServiceExt};

#[derive(RetrySpec)]
#[spec("ui.retry.tower")]
pub struct PetRetry;

pub struct Lookup {
    pub id: u64,
}

async fn find(lookup: Lookup) -> Result<String, resilient_core::BoxError> {
    Ok(format!("pet {}", lookup.id))
}

async fn demo() {
    let pets = ServiceBuilder::new()
        .layer(PetRetry::layer())
        .service(service_fn(find));
    let _ = pets.oneshot(Lookup { id: 7 }).await;
}

fn main() {
    let _ = demo;
}

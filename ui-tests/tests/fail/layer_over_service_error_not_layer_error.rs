// A layer over a service whose error cannot carry a rejection: refused
// where the layer is applied, in words, before any method is called.
use resilient_core::layer::Layered;
use resilient_core::CircuitBreakerSpec;
use tower::{service_fn, ServiceBuilder, ServiceExt};

#[derive(CircuitBreakerSpec)]
#[spec("ui.circuitbreaker.tower")]
pub struct PetBreaker;

async fn find(id: u64) -> Result<String, std::io::Error> {
    Ok(format!("pet {id}"))
}

async fn demo() {
    let pets = ServiceBuilder::new()
        .layer(PetBreaker::layer())
        .service(service_fn(find));
    let _ = pets.oneshot(7).await;
}

fn main() {
    let _ = demo;
}

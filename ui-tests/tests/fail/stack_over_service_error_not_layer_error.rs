// A stack over a service whose error cannot carry a rejection: refused
// where the stack is applied, in words, before any method is called.
use resilient_core::layer::StackLayer;
use resilient_core::{CircuitBreakerSpec, TimeoutSpec};
use tower::{service_fn, ServiceBuilder, ServiceExt};

#[derive(CircuitBreakerSpec)]
#[spec("ui.circuitbreaker.stack_error")]
pub struct PetBreaker;

#[derive(TimeoutSpec)]
#[spec("ui.timeout.stack_error")]
pub struct PetTimeout;

async fn find(id: u64) -> Result<String, std::io::Error> {
    Ok(format!("pet {id}"))
}

async fn demo() {
    let pets = ServiceBuilder::new()
        .layer(StackLayer::new().spec::<PetBreaker>().spec::<PetTimeout>())
        .service(service_fn(find));
    let _ = pets.oneshot(7).await;
}

fn main() {
    let _ = demo;
}

//! `key = tenant` where `Tenant` implements neither `PartitionKey` nor
//! `Display`: the error points at the key expression and says how to key by
//! the value's text.
use resilient_core::{circuit_breakable, CircuitBreakerSpec};
use ui_tests::UiError;

#[derive(CircuitBreakerSpec)]
#[spec("ui.breaker.tenant")]
pub struct TenantBreaker;

pub struct Tenant {
    pub id: u32,
}

#[circuit_breakable(TenantBreaker, key = tenant)]
pub async fn find(tenant: Tenant, id: u64) -> Result<u64, UiError> {
    Ok(id + u64::from(tenant.id))
}

fn main() {}

// A stack's list of parts is sealed: code outside the crate cannot add a
// part of its own, which could call the inner service twice at once (the
// middleware's inner call relies on one attempt's future being dropped
// before the next call).
use std::pin::Pin;
use std::task::{Context, Poll};

use resilient_core::layer::{Chain, StackOut};
use tower::Service;

#[derive(Clone)]
pub struct Twice;

impl<Svc: Service<u64>> Chain<Svc, u64> for Twice {
    type State = ();

    fn idle() {}

    fn start(
        &self,
        _: Pin<&mut ()>,
        svc: &mut Svc,
        req: u64,
    ) -> Option<StackOut<Svc::Response, Svc::Error>> {
        let _first = svc.call(req);
        let _second = svc.call(req);
        None
    }

    fn poll(
        &self,
        _: Pin<&mut ()>,
        _: &mut Context<'_>,
        _: &mut Svc,
    ) -> Poll<StackOut<Svc::Response, Svc::Error>> {
        Poll::Pending
    }

    fn stop(&self, _: Pin<&mut ()>) {}

    const RETRIES: bool = false;
}

fn main() {}

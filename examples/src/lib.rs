//! Shared pieces of the example programs: the pet store service (an axum
//! server whose handlers call an upstream through reqwest), a scripted
//! loopback server that counts the requests it receives, so that the
//! examples and their tests count real requests over real sockets, its
//! `/health` and `/metrics` routes, its admin routes and dashboard, and a
//! watch that reloads the configuration when its file changes; with the
//! `grpc` feature, a tonic greeter (client and scripted server).

pub mod admin;
#[cfg(feature = "grpc")]
pub mod grpc;
pub mod health;
pub mod http;
pub mod petstore;
pub mod reload;

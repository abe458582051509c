//! Shared pieces of the example programs: a tiny HTTP/1.1 server and client on
//! the loopback interface, so that the examples and their tests count real
//! requests over real sockets, and a watch that reloads the configuration
//! when its file changes.
//!
//! The client and server are written by hand (about a hundred lines) to keep
//! the examples' build small; they speak just enough HTTP for one request per
//! connection.

pub mod health;
pub mod http;
pub mod petstore;
pub mod reload;

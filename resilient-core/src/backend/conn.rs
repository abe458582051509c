//! The Redis backend's client and connections: to one server, or (feature
//! `redis-cluster`, `cluster = true`) to the nodes of a Redis Cluster.
//!
//! A cluster connection sends each script to the node that serves its
//! key's slot (a decision's keys share one hash tag, so one slot), follows
//! `MOVED` and `ASK` redirections, and reads the cluster's slots again
//! after a reshard or a failover; the script is run by its hash and, on a
//! node that answers `NOSCRIPT` (a new primary, a node a slot moved to),
//! by its source, which loads it there. Each connection is bounded by the
//! backend's `connect_timeout` and `timeout`, as a single server's is.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// The client of the backend: the server, or the cluster's seed nodes.
#[derive(Clone)]
pub(crate) enum Client {
    Single(redis::Client),
    #[cfg(feature = "redis-cluster")]
    Cluster(Box<redis::cluster::ClusterClient>),
}

impl Client {
    /// The client of `url` (a cluster's node when `cluster`, and `nodes`
    /// more of them), each connection bounded by `connect_timeout`, each
    /// reply by `timeout`.
    pub(crate) fn open(
        url: &str,
        nodes: &[String],
        cluster: bool,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> RedisResult<Self> {
        if cluster {
            #[cfg(feature = "redis-cluster")]
            {
                let seeds = std::iter::once(url).chain(nodes.iter().map(String::as_str));
                return redis::cluster::ClusterClient::builder(seeds)
                    .connection_timeout(connect_timeout)
                    .response_timeout(timeout)
                    .build()
                    .map(|c| Client::Cluster(Box::new(c)));
            }
        }
        let _ = (nodes, cluster, connect_timeout, timeout);
        redis::Client::open(url).map(Client::Single)
    }

    /// A connection for async decisions, within `connect_timeout`.
    pub(crate) async fn connect_async(
        &self,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> RedisResult<AsyncConn> {
        match self {
            Client::Single(client) => {
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(connect_timeout))
                    .set_response_timeout(Some(timeout));
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map(AsyncConn::Single)
            }
            #[cfg(feature = "redis-cluster")]
            Client::Cluster(client) => client.get_async_connection().await.map(AsyncConn::Cluster),
        }
    }

    /// A blocking connection, its reads and writes bounded by `timeout`.
    pub(crate) fn connect_blocking(
        &self,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> RedisResult<BlockingConn> {
        let conn = match self {
            Client::Single(client) => {
                BlockingConn::Single(client.get_connection_with_timeout(connect_timeout)?)
            }
            #[cfg(feature = "redis-cluster")]
            Client::Cluster(client) => BlockingConn::Cluster(Box::new(client.get_connection()?)),
        };
        conn.set_timeout(timeout)?;
        Ok(conn)
    }
}

/// A connection for async decisions: multiplexed, cloned by each caller.
#[derive(Clone)]
pub(crate) enum AsyncConn {
    Single(MultiplexedConnection),
    #[cfg(feature = "redis-cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
}

impl redis::aio::ConnectionLike for AsyncConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            AsyncConn::Single(c) => c.req_packed_command(cmd),
            #[cfg(feature = "redis-cluster")]
            AsyncConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            AsyncConn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "redis-cluster")]
            AsyncConn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            AsyncConn::Single(c) => c.get_db(),
            #[cfg(feature = "redis-cluster")]
            AsyncConn::Cluster(c) => c.get_db(),
        }
    }
}

/// A blocking connection, for the decisions that have no runtime.
pub(crate) enum BlockingConn {
    Single(redis::Connection),
    #[cfg(feature = "redis-cluster")]
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl BlockingConn {
    /// Bounds each read and write by `timeout`.
    pub(crate) fn set_timeout(&self, timeout: Duration) -> RedisResult<()> {
        match self {
            BlockingConn::Single(c) => {
                c.set_read_timeout(Some(timeout))?;
                c.set_write_timeout(Some(timeout))
            }
            #[cfg(feature = "redis-cluster")]
            BlockingConn::Cluster(c) => {
                c.set_read_timeout(Some(timeout))?;
                c.set_write_timeout(Some(timeout))
            }
        }
    }
}

impl redis::ConnectionLike for BlockingConn {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        match self {
            BlockingConn::Single(c) => c.req_packed_command(cmd),
            #[cfg(feature = "redis-cluster")]
            BlockingConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        match self {
            BlockingConn::Single(c) => c.req_packed_commands(cmd, offset, count),
            #[cfg(feature = "redis-cluster")]
            BlockingConn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn req_command(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        // A cluster routes by the command's key: it needs the command, not
        // its bytes.
        match self {
            BlockingConn::Single(c) => c.req_command(cmd),
            #[cfg(feature = "redis-cluster")]
            BlockingConn::Cluster(c) => c.req_command(cmd),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            BlockingConn::Single(c) => c.get_db(),
            #[cfg(feature = "redis-cluster")]
            BlockingConn::Cluster(c) => c.get_db(),
        }
    }

    fn check_connection(&mut self) -> bool {
        match self {
            BlockingConn::Single(c) => c.check_connection(),
            #[cfg(feature = "redis-cluster")]
            BlockingConn::Cluster(c) => c.check_connection(),
        }
    }

    fn is_open(&self) -> bool {
        match self {
            BlockingConn::Single(c) => c.is_open(),
            #[cfg(feature = "redis-cluster")]
            BlockingConn::Cluster(c) => c.is_open(),
        }
    }
}

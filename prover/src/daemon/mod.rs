//! The proving daemon: config, HTTP API, pipelined engine, lifecycle.
//!
//! # Layout
//! - [`config`]: the TOML file, validated with key paths.
//! - [`lifecycle`]: `run(config, listener, shutdown)`, start-up to exit.
//! - [`api`]: HTTP routes, authentication, error mapping.
//! - [`http`]: serving them with timeouts, a connection cap and size limits.
//! - [`engine`]: synthesis and device workers, jobs, admission.
//! - [`grpc`]: `cuzk.v1.ProvingEngine`, the service Curio calls.
//! - [`metrics`]: Prometheus registry behind `/metrics`.
//! - [`pidfile`]: exclusive pid file with stale detection.
//! - [`client`]: blocking API client used by `prover client` and `prover health`.
//! - [`xid_watch`]: NVML's critical XIDs, which take a GPU out of rotation.
//!
//! The `daemon`, `client` and `health` subcommands (signals, logging, exit
//! codes) belong to the binary's `cli::daemon`, which binds the listener and
//! hands it to [`lifecycle::run`].
pub mod api;
pub mod client;
pub mod config;
pub mod engine;
pub mod grpc;
pub mod http;
pub mod lifecycle;
pub mod metrics;
pub mod pidfile;
pub mod xid_watch;

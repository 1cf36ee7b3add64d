//! The proving daemon: config, HTTP API, pipelined engine, lifecycle.
//!
//! # Layout
//! - [`config`]: the TOML file, validated with key paths.
//! - [`lifecycle`]: `run(config, listener, shutdown)`, start-up to exit.
pub mod config;

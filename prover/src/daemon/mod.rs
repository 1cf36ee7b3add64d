//! The proving daemon: config, HTTP API, pipelined engine, lifecycle.

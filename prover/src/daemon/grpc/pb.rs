//! The messages and the server trait generated from
//! `proto/cuzk/v1/proving.proto` at build time (`build.rs`).
#![allow(clippy::all, missing_docs)]

tonic::include_proto!("cuzk.v1");

//! Exit codes of the prover binary: defined in `fleet_wire::exit`, because
//! `fleetctl` reads them from the `prover client` commands it runs on hosts.

pub use fleet_wire::exit::*;

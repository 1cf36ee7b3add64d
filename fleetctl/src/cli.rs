//! Command-line types of the fleetctl binary.

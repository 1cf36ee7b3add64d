//! Health policy over probe documents; fleetctl status and health.

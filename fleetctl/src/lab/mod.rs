//! A lab fleet of real sshd hosts in network, PID and mount namespaces, for tests and demos.

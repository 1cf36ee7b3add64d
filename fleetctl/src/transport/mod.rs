//! One transport type over SSH (openssh, native mux) or the local machine.

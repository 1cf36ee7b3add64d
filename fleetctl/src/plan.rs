//! What a run would do on which host, without changing anything.

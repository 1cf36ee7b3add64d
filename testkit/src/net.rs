//! A loopback address where connections are refused, for tests of "nothing
//! listens there". Binding a port and dropping it to get a free one races
//! every other process on the host, which may take the port in between; a
//! socket that is bound but never listens keeps the port taken, and the
//! kernel refuses connections to it.

use socket2::{Domain, Socket, Type};
use std::net::{Ipv4Addr, SocketAddr};

/// A bound, never-listening TCP socket on 127.0.0.1; the port is free again
/// once this is dropped.
pub struct RefusingAddr {
    _socket: Socket,
    addr: SocketAddr,
}

impl RefusingAddr {
    pub fn new() -> std::io::Result<Self> {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
        socket.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())?;
        let addr = socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| std::io::Error::other("bound socket has no IP address"))?;
        Ok(Self {
            _socket: socket,
            addr,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_refused_and_the_port_stays_taken() {
        let r = RefusingAddr::new().unwrap();
        assert_ne!(r.addr().port(), 0);
        let err = std::net::TcpStream::connect(r.addr()).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
        assert!(std::net::TcpListener::bind(r.addr()).is_err(), "port taken");
    }
}

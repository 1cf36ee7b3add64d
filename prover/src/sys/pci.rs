//! A GPU's PCI address: the one name CUDA and NVML agree on. CUDA ordinals
//! follow `CUDA_DEVICE_ORDER` and `CUDA_VISIBLE_DEVICES`, NVML indices do
//! not, so anything that joins the two (an NVML event about a device the
//! engine proves on) matches on this.

use std::fmt;

/// Domain, bus and device number of a PCI function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress {
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
}

impl fmt::Display for PciAddress {
    /// `nvidia-smi`'s spelling, `00000000:1B:00.0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:08X}:{:02X}:{:02X}.0",
            self.domain, self.bus, self.device
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_as_nvidia_smi_does() {
        let a = PciAddress {
            domain: 0,
            bus: 0x1b,
            device: 0,
        };
        assert_eq!(a.to_string(), "00000000:1B:00.0");
    }
}

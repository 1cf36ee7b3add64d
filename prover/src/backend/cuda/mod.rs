//! The CUDA backend: NVRTC-compiled kernels from kernels/, pinned uploads, device NTTs.

pub mod kernels;

//! Per-GPU facts from NVML. Each query is independent: one that the GPU or
//! driver does not support leaves its field empty and notes why.

use fleet_wire::health::{Ecc, Gpu, GpuProcess, Gpus, Nvml, Pcie, RemappedRows, RetiredPages};
use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::FieldValueSample;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::*;
use nvml_wrapper::Device;

/// How long the probe listens for XID events after registering for them.
const XID_LISTEN_MS: u32 = 50;

/// The GPU section: NVML's availability and every device it lists.
pub fn probe() -> Gpus {
    let nvml = match nvml_wrapper::Nvml::init() {
        Ok(n) => n,
        Err(e) => {
            return Gpus {
                nvml: Nvml {
                    available: false,
                    reason: Some(format!("NVML unavailable: {e}")),
                    ..Default::default()
                },
                devices: Vec::new(),
            }
        }
    };
    let cuda_version = nvml.sys_cuda_driver_version().ok().map(|v| {
        format!(
            "{}.{}",
            nvml_wrapper::cuda_driver_version_major(v),
            nvml_wrapper::cuda_driver_version_minor(v)
        )
    });
    let mut section = Gpus {
        nvml: Nvml {
            available: true,
            reason: None,
            driver_version: nvml.sys_driver_version().ok(),
            cuda_version,
            nvml_version: nvml.sys_nvml_version().ok(),
        },
        devices: Vec::new(),
    };
    let count = match nvml.device_count() {
        Ok(c) => c,
        Err(e) => {
            section.nvml.reason = Some(format!("device count: {e}"));
            return section;
        }
    };
    let mut devices = Vec::new();
    for index in 0..count {
        match nvml.device_by_index(index) {
            Ok(dev) => {
                section.devices.push(device_facts(index, &dev));
                devices.push((index, dev));
            }
            Err(e) => section.devices.push(Gpu {
                index,
                errors: vec![format!("open: {e}")],
                ..Default::default()
            }),
        }
    }
    collect_xids(&nvml, &devices, &mut section.devices);
    section
}

/// NVML's `utilization.gpu` (percent) of every device it lists, by NVML
/// index; empty when NVML is unavailable, and a device whose query fails is
/// left out, because a scrape must never fail on the GPU side. NVML is opened
/// once per process and kept: `/metrics` is scraped every few seconds, and
/// opening NVML costs far more than reading one counter.
pub fn utilization() -> Vec<(u32, u32)> {
    let Some(nvml) = kept_nvml() else {
        return Vec::new();
    };
    let count = nvml.device_count().unwrap_or(0);
    (0..count)
        .filter_map(|index| {
            let dev = nvml.device_by_index(index).ok()?;
            Some((index, dev.utilization_rates().ok()?.gpu))
        })
        .collect()
}

/// NVML opened once for the process (None without a driver).
fn kept_nvml() -> Option<&'static nvml_wrapper::Nvml> {
    static NVML: std::sync::OnceLock<Option<nvml_wrapper::Nvml>> = std::sync::OnceLock::new();
    NVML.get_or_init(|| nvml_wrapper::Nvml::init().ok())
        .as_ref()
}

/// NVML's memory figures (total, free bytes) of every device it lists, by
/// NVML index; as [`utilization`], empty without NVML and never failing.
pub fn memory() -> Vec<(u32, u64, u64)> {
    let Some(nvml) = kept_nvml() else {
        return Vec::new();
    };
    let count = nvml.device_count().unwrap_or(0);
    (0..count)
        .filter_map(|index| {
            let m = nvml.device_by_index(index).ok()?.memory_info().ok()?;
            Some((index, m.total, m.free))
        })
        .collect()
}

/// Records `r`'s value, or its error under `field` (NotSupported is a fact, not an error).
fn take<T>(errors: &mut Vec<String>, field: &str, r: Result<T, NvmlError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(NvmlError::NotSupported) => None,
        Err(e) => {
            errors.push(format!("{field}: {e}"));
            None
        }
    }
}

fn device_facts(index: u32, dev: &Device) -> Gpu {
    let mut e = Vec::new();
    let mem = take(&mut e, "memory_info", dev.memory_info());
    let util = take(&mut e, "utilization_rates", dev.utilization_rates());
    let fields = take(
        &mut e,
        "field_values",
        dev.field_values_for(&[
            FieldId(NVML_FI_DEV_MEMORY_TEMP),
            FieldId(NVML_FI_DEV_REMAPPED_COR),
            FieldId(NVML_FI_DEV_REMAPPED_UNC),
            FieldId(NVML_FI_DEV_REMAPPED_PENDING),
            FieldId(NVML_FI_DEV_REMAPPED_FAILURE),
        ]),
    )
    .unwrap_or_default();
    let field = |i: usize| fields.get(i).and_then(field_u64);
    let ecc_mode = take(&mut e, "ecc_mode", dev.is_ecc_enabled());
    let mut ecc_count = |err: MemoryError, counter: EccCounter, name: &str| {
        take(&mut e, name, dev.total_ecc_errors(err, counter))
    };
    let ecc = Ecc {
        enabled: ecc_mode.as_ref().map(|m| m.currently_enabled),
        pending_enabled: ecc_mode.as_ref().map(|m| m.pending_enabled),
        volatile_corrected: ecc_count(
            MemoryError::Corrected,
            EccCounter::Volatile,
            "ecc_volatile_corrected",
        ),
        volatile_uncorrected: ecc_count(
            MemoryError::Uncorrected,
            EccCounter::Volatile,
            "ecc_volatile_uncorrected",
        ),
        aggregate_corrected: ecc_count(
            MemoryError::Corrected,
            EccCounter::Aggregate,
            "ecc_aggregate_corrected",
        ),
        aggregate_uncorrected: ecc_count(
            MemoryError::Uncorrected,
            EccCounter::Aggregate,
            "ecc_aggregate_uncorrected",
        ),
    };
    use nvml_wrapper::enum_wrappers::device::RetirementCause;
    let retired_pages = RetiredPages {
        single_bit: take(
            &mut e,
            "retired_pages_sbe",
            dev.retired_pages(RetirementCause::MultipleSingleBitEccErrors),
        )
        .map(|p| p.len() as u64),
        double_bit: take(
            &mut e,
            "retired_pages_dbe",
            dev.retired_pages(RetirementCause::DoubleBitEccError),
        )
        .map(|p| p.len() as u64),
        pending: take(
            &mut e,
            "retired_pages_pending",
            dev.are_pages_pending_retired(),
        ),
    };
    let remapped_rows = RemappedRows {
        correctable: field(1),
        uncorrectable: field(2),
        pending: field(3).map(|v| v != 0),
        failure: field(4).map(|v| v != 0),
    };
    let pcie = Pcie {
        gen_current: take(&mut e, "pcie_gen", dev.current_pcie_link_gen()),
        gen_max: take(&mut e, "pcie_gen_max", dev.max_pcie_link_gen()),
        width_current: take(&mut e, "pcie_width", dev.current_pcie_link_width()),
        width_max: take(&mut e, "pcie_width_max", dev.max_pcie_link_width()),
        replay_counter: take(&mut e, "pcie_replay_counter", dev.pcie_replay_counter())
            .map(u64::from),
    };
    let processes = take(&mut e, "compute_processes", dev.running_compute_processes()).map(|ps| {
        ps.into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used_memory_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                },
            })
            .collect()
    });
    let throttle_reasons =
        take(&mut e, "throttle_reasons", dev.current_throttle_reasons()).map(|r| {
            r.iter_names()
                .map(|(name, _)| name.to_lowercase())
                .collect()
        });
    Gpu {
        index,
        name: take(&mut e, "name", dev.name()),
        uuid: take(&mut e, "uuid", dev.uuid()),
        bus_id: take(&mut e, "pci_info", dev.pci_info()).map(|p| p.bus_id),
        memory_used_bytes: mem.as_ref().map(|m| m.used),
        memory_total_bytes: mem.as_ref().map(|m| m.total),
        utilization_gpu_pct: util.as_ref().map(|u| u.gpu),
        utilization_memory_pct: util.as_ref().map(|u| u.memory),
        temperature_gpu_c: take(
            &mut e,
            "temperature",
            dev.temperature(TemperatureSensor::Gpu),
        ),
        temperature_memory_c: field(0).and_then(|v| u32::try_from(v).ok()),
        power_draw_w: take(&mut e, "power_usage", dev.power_usage())
            .map(|mw| f64::from(mw) / 1000.0),
        power_limit_w: take(&mut e, "power_limit", dev.enforced_power_limit())
            .map(|mw| f64::from(mw) / 1000.0),
        clock_sm_mhz: take(&mut e, "clock_sm", dev.clock_info(Clock::SM)),
        clock_memory_mhz: take(&mut e, "clock_memory", dev.clock_info(Clock::Memory)),
        clock_sm_max_mhz: take(&mut e, "clock_sm_max", dev.max_clock_info(Clock::SM)),
        clock_memory_max_mhz: take(
            &mut e,
            "clock_memory_max",
            dev.max_clock_info(Clock::Memory),
        ),
        throttle_reasons,
        pcie,
        ecc,
        retired_pages,
        remapped_rows,
        xid_events: None,
        processes,
        errors: e,
    }
}

fn field_u64(sample: &Result<FieldValueSample, NvmlError>) -> Option<u64> {
    match sample.as_ref().ok()?.value.as_ref().ok()? {
        SampleValue::U32(v) => Some(u64::from(*v)),
        SampleValue::U64(v) => Some(*v),
        SampleValue::I64(v) => u64::try_from(*v).ok(),
        SampleValue::F64(v) if *v >= 0.0 => Some(*v as u64),
        SampleValue::F64(_) => None,
    }
}

/// NVML only offers XIDs as events raised after registration, so the probe
/// listens briefly on each device; a device that cannot register (no
/// permission, not supported) keeps `xid_events: None`.
fn collect_xids(nvml: &nvml_wrapper::Nvml, devices: &[(u32, Device)], out: &mut [Gpu]) {
    use nvml_wrapper::bitmasks::event::EventTypes;
    for (index, dev) in devices {
        let Ok(set) = nvml.create_event_set() else {
            return;
        };
        let Ok(set) = dev.register_events(EventTypes::CRITICAL_XID_ERROR, set) else {
            continue;
        };
        let mut xids = Vec::new();
        while let Ok(ev) = set.wait(XID_LISTEN_MS) {
            if let Some(XidError::Value(x)) = ev.event_data {
                xids.push(x);
            }
        }
        if let Some(g) = out.iter_mut().find(|g| g.index == *index) {
            g.xid_events = Some(xids);
        }
    }
}

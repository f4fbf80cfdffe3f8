//! The wgpu device: adapter selection, buffers, pipelines (compiled once, cached by name) and
//! error capture (wgpu reports validation errors through a callback; they are kept and returned
//! as [`GpuError::Wgpu`] instead of panicking).

use crate::error::{GpuError, Result};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use wgpu::util::DeviceExt;

/// Runs a future to completion on this thread. wgpu's native futures are ready at once or after
/// a device poll, so a spin with yields is enough (no async runtime needed).
pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

/// One wgpu adapter and device, with a cache of compiled pipelines.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    error: Arc<Mutex<Option<String>>>,
    pipelines: Mutex<HashMap<String, wgpu::ComputePipeline>>,
}

/// Whether an adapter can be opened (Vulkan, Metal or DirectX 12).
pub fn is_available() -> bool {
    adapter().is_ok()
}

/// Whether an adapter that is a real GPU (not a software rasterizer such as llvmpipe) can be
/// opened: what `--device auto` asks before picking this backend over the CPU.
pub fn has_hardware_adapter() -> bool {
    adapter().is_ok_and(|a| a.get_info().device_type != wgpu::DeviceType::Cpu)
}

fn adapter() -> Result<wgpu::Adapter> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::PRIMARY,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        force_fallback_adapter: false,
        compatible_surface: None,
        apply_limit_buckets: false,
    }))
    .map_err(|e| GpuError::NoAdapter(e.to_string()))
}

impl Gpu {
    /// Opens the preferred adapter (a discrete GPU first) with the largest limits it offers.
    pub fn new() -> Result<Gpu> {
        let adapter = adapter()?;
        let info = adapter.get_info();
        let limits = adapter.limits();
        let (device, queue) = block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("molla"),
            required_features: wgpu::Features::empty(),
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::default(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| GpuError::Device(e.to_string()))?;
        let error = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&error);
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut s = slot.lock().unwrap_or_else(|p| p.into_inner());
            if s.is_none() {
                *s = Some(e.to_string().replace('\n', " "));
            }
        }));
        Ok(Gpu {
            device,
            queue,
            info,
            limits,
            error,
            pipelines: Mutex::new(HashMap::new()),
        })
    }

    /// "NAME (BACKEND)".
    pub fn name(&self) -> String {
        format!("{} ({:?})", self.info.name, self.info.backend)
    }

    /// The first error wgpu reported since the last check, if any.
    pub(crate) fn check(&self) -> Result<()> {
        let mut s = self.error.lock().unwrap_or_else(|p| p.into_inner());
        match s.take() {
            Some(m) => Err(GpuError::Wgpu(m)),
            None => Ok(()),
        }
    }

    /// The pipeline for `entry` of the module `key`, compiled from `source()` on first use.
    pub(crate) fn pipeline(
        &self,
        key: &str,
        entry: &str,
        source: impl FnOnce() -> String,
    ) -> Result<wgpu::ComputePipeline> {
        let name = format!("{key}:{entry}");
        let mut cache = self.pipelines.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = cache.get(&name) {
            return Ok(p.clone());
        }
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(key),
                source: wgpu::ShaderSource::Wgsl(source().into()),
            });
        let p = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&name),
                layout: None,
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            });
        self.check()?;
        cache.insert(name, p.clone());
        Ok(p)
    }

    /// A storage buffer holding `bytes`, padded with zeros to a multiple of 4 plus 4 bytes (the
    /// shaders read a word past a field that ends near the end).
    pub(crate) fn upload_bytes(&self, label: &str, bytes: &[u8]) -> Result<wgpu::Buffer> {
        let size = (bytes.len().div_ceil(4) + 1) as u64 * 4;
        if size > self.limits.max_storage_buffer_binding_size || size > self.limits.max_buffer_size
        {
            return Err(GpuError::Unsupported(format!(
                "tensor '{label}' of {size} bytes (the adapter binds at most {} bytes)",
                self.limits.max_storage_buffer_binding_size
            )));
        }
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: true,
        });
        {
            let mut view = buf
                .slice(..)
                .get_mapped_range_mut()
                .map_err(|e| GpuError::Wgpu(e.to_string()))?;
            view.slice(..bytes.len()).copy_from_slice(bytes);
        }
        buf.unmap();
        Ok(buf)
    }

    pub(crate) fn upload_f32(&self, label: &str, v: &[f32]) -> Result<wgpu::Buffer> {
        self.upload_bytes(label, bytemuck::cast_slice(v))
    }

    /// A zeroed storage buffer of `bytes` (at least 4).
    pub(crate) fn storage(&self, label: &str, bytes: u64) -> Result<wgpu::Buffer> {
        let size = bytes.max(4).div_ceil(4) * 4;
        if size > self.limits.max_storage_buffer_binding_size {
            return Err(GpuError::Unsupported(format!(
                "buffer '{label}' of {size} bytes (the adapter binds at most {} bytes)",
                self.limits.max_storage_buffer_binding_size
            )));
        }
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        }))
    }

    /// A uniform buffer of 32-bit fields.
    pub(crate) fn uniform(&self, label: &str, fields: &[u32]) -> wgpu::Buffer {
        let mut v = fields.to_vec();
        v.resize(fields.len().div_ceil(4).max(1) * 4, 0);
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: bytemuck::cast_slice(&v),
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            })
    }

    /// A bind group for group 0 of `pipeline` with buffer `b` at binding `i`.
    pub(crate) fn bind(
        &self,
        pipeline: &wgpu::ComputePipeline,
        entries: &[(u32, &wgpu::Buffer)],
    ) -> wgpu::BindGroup {
        let layout = pipeline.get_bind_group_layout(0);
        let entries: Vec<wgpu::BindGroupEntry> = entries
            .iter()
            .map(|&(binding, b)| wgpu::BindGroupEntry {
                binding,
                resource: b.as_entire_binding(),
            })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &entries,
        })
    }

    /// Submits `encoder` after copying the first `bytes` of `src` into a mappable buffer, waits,
    /// and returns them as f32.
    pub(crate) fn submit_read(
        &self,
        mut encoder: wgpu::CommandEncoder,
        src: &wgpu::Buffer,
        bytes: u64,
    ) -> Result<Vec<f32>> {
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size: bytes.max(4),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        encoder.copy_buffer_to_buffer(src, 0, &staging, 0, bytes);
        self.queue.submit([encoder.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| GpuError::Wgpu(e.to_string()))?;
        self.check()?;
        rx.recv()
            .map_err(|e| GpuError::Wgpu(e.to_string()))?
            .map_err(|e| GpuError::Wgpu(e.to_string()))?;
        let out: Vec<f32> = {
            let view = staging
                .slice(..)
                .get_mapped_range()
                .map_err(|e| GpuError::Wgpu(e.to_string()))?;
            bytemuck::pod_collect_to_vec(&view[..bytes as usize])
        };
        staging.unmap();
        Ok(out)
    }

    /// Submits `encoder` without waiting.
    pub(crate) fn submit(&self, encoder: wgpu::CommandEncoder) -> Result<()> {
        self.queue.submit([encoder.finish()]);
        self.check()
    }
}

/// Workgroup counts for `threads` threads in groups of 64, spread over x and y (x at most 32768).
pub(crate) fn grid(threads: u32) -> (u32, u32) {
    let groups = threads.div_ceil(64).max(1);
    let x = groups.min(32768);
    (x, groups.div_ceil(x))
}

/// Workgroup counts for `rows` workgroups spread over x and y.
pub(crate) fn rows_grid(rows: u32) -> (u32, u32) {
    let x = rows.clamp(1, 32768);
    (x, rows.div_ceil(x))
}

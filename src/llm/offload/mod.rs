//! Offloading layers to a GPU: how much memory a model needs where ([`estimate`], made from its
//! GGUF header before loading), how many layers fit a device's free memory
//! ([`MemoryEstimate::most_layers_within`]), and the placement a model is then loaded with
//! ([`LayerPlacement`]). The supervisor decides with these; [`crate::llm::Model`] applies them.
//! The header is read with [`crate::gguf`]'s reader; layers are counted as [`BlockBytes`] counts
//! them, as the RPC split does.
//!
//! Key types: [`LayerPlacement`], [`MemoryEstimate`], [`Split`], [`ModelShape`],
//! [`EstimateParams`], [`BlockBytes`]. Cost: one header parse per estimate.

mod blocks;
mod estimate;
#[cfg(test)]
mod tests;

pub use blocks::BlockBytes;
pub use estimate::{EstimateParams, MemoryEstimate, ModelShape, Split};

use std::path::Path;

use super::LlmError;

/// Where a model's layers go when it loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LayerPlacement {
    /// llama.cpp's own default: every layer on the first GPU when there is one (tools and
    /// tests that load a model directly).
    #[default]
    LlamaDefault,
    /// Everything on the host, GPUs or not (`-ngl 0`).
    Cpu,
    /// `layers` on the device at ggml registry `index` (the output layer first, then repeating
    /// layers from the last), the rest on the host.
    Device { index: usize, layers: u32 },
}

impl LayerPlacement {
    /// Layers that go to a device.
    pub fn device_layers(&self) -> u32 {
        match self {
            LayerPlacement::Device { layers, .. } => *layers,
            _ => 0,
        }
    }
}

/// The memory estimate for the GGUF at `path` with context `params`.
pub fn estimate(path: &Path, params: &EstimateParams) -> Result<MemoryEstimate, LlmError> {
    let shape = ModelShape::read(path)
        .map_err(|reason| LlmError::NotAModel { path: path.to_path_buf(), reason })?;
    Ok(MemoryEstimate::new(&shape, params))
}

//! A model's weights by part, as llama.cpp places them: the input embeddings, each repeating
//! layer `blk.N`, and the output layer as layer `n_layer`. The memory estimate and the RPC
//! split both count layers so.
//!
//! Key type: [`BlockBytes`]. Cost: one pass over the tensor table.

/// Weight bytes of a model's parts, as its GGUF lists its tensors: the input embeddings (kept
/// on the local CPU), and each block `blk.N` with the output layer as block `n_layer`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BlockBytes {
    pub input: u64,
    pub per_block: Vec<u64>,
}

impl BlockBytes {
    /// Sorts tensors (name, bytes) into parts. A model without `output.weight` ties its output
    /// to the embeddings, which llama.cpp then also places with the output layer.
    pub fn from_tensors<'a>(
        n_layer: u32,
        tensors: impl IntoIterator<Item = (&'a str, u64)>,
    ) -> Self {
        let mut parts = BlockBytes {
            input: 0,
            per_block: vec![0; n_layer as usize + 1],
        };
        let mut has_output = false;
        let mut embeddings = 0;
        for (name, bytes) in tensors {
            let block = name
                .strip_prefix("blk.")
                .and_then(|rest| rest.split('.').next())
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|&n| n < n_layer as usize);
            match block {
                Some(n) => parts.per_block[n] += bytes,
                None if name.starts_with("token_embd") => {
                    parts.input += bytes;
                    if name == "token_embd.weight" {
                        embeddings = bytes;
                    }
                }
                None => {
                    has_output |= name == "output.weight";
                    parts.per_block[n_layer as usize] += bytes;
                }
            }
        }
        if !has_output {
            parts.per_block[n_layer as usize] += embeddings;
        }
        parts
    }
}

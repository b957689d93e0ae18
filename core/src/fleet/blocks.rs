//! A request's blocks as a worker's prefix cache sees them.
//!
//! A trace names its prompt blocks of `trace` tokens; an engine caches blocks of `engine`
//! tokens. Two requests share engine block `k` exactly when their first `(k + 1) * engine`
//! tokens are equal, which the trace tells through its ids: equal leading ids, equal tokens.
//! So an engine block's id chains its parent's id with what the trace says of its tokens:
//!
//! - equal sizes: the trace block's id;
//! - a smaller engine block (`trace = k * engine`): the trace block's id and the sub-block's
//!   index, so a partial last trace block still gives its full sub-blocks, equal to the
//!   leading sub-blocks of any request with the same ids;
//! - a larger engine block (`engine = k * trace`): the `k` trace ids it covers.
//!
//! Only full engine blocks get an id (a partial block is never reused), and none past the
//! ids the trace gives. Ids are XXH3-64 hashes of the parent and the parts, so they are as
//! collision-free as the trace's own.

use alloc::vec::Vec;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::FleetError;
use crate::trace::Request;

/// Seed of the engine ids' hash (any constant: ids only need to be equal or not).
const SEED: u64 = 0x6b76_7265_7573_6566;

/// How trace blocks map onto engine blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// One engine block per trace block.
    Same,
    /// Each trace block cut into this many engine blocks.
    Split(usize),
    /// This many trace blocks per engine block.
    Merge(usize),
}

/// See the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EngineBlocks {
    engine: usize,
    shape: Shape,
}

impl EngineBlocks {
    /// The mapping from blocks of `trace` tokens to blocks of `engine` tokens; one must
    /// divide the other.
    pub(crate) fn new(trace: usize, engine: usize) -> Result<EngineBlocks, FleetError> {
        let shape = match (trace, engine) {
            (0, _) | (_, 0) => return Err(FleetError::ZeroBlockSize),
            (t, e) if t == e => Shape::Same,
            (t, e) if t % e == 0 => Shape::Split(t / e),
            (t, e) if e % t == 0 => Shape::Merge(e / t),
            (trace, engine) => return Err(FleetError::BlockSizes { trace, engine }),
        };
        Ok(EngineBlocks { engine, shape })
    }

    /// Tokens per engine block.
    pub(crate) fn size(&self) -> usize {
        self.engine
    }

    /// The ids of `request`'s full engine blocks, in order, into `out` (cleared first).
    pub(crate) fn prompt_ids(&self, request: &Request, out: &mut Vec<u64>) {
        out.clear();
        let full = (request.prompt_tokens / self.engine as u64) as usize;
        let trace_ids = &request.prompt_ids;
        let mut parent = 0u64;
        let mut push = |parts: &[u64], out: &mut Vec<u64>| {
            let mut bytes = [0u8; 8 * 9];
            bytes[..8].copy_from_slice(&parent.to_le_bytes());
            for (chunk, part) in bytes[8..].chunks_exact_mut(8).zip(parts) {
                chunk.copy_from_slice(&part.to_le_bytes());
            }
            parent = xxh3_64_with_seed(&bytes[..8 * (1 + parts.len())], SEED);
            out.push(parent);
        };
        match self.shape {
            Shape::Same => {
                for &id in trace_ids.iter().take(full) {
                    push(&[id], out);
                }
            }
            Shape::Split(k) => {
                'blocks: for &id in trace_ids {
                    for sub in 0..k {
                        if out.len() == full {
                            break 'blocks;
                        }
                        push(&[id, sub as u64], out);
                    }
                }
            }
            Shape::Merge(k) => {
                // Up to 8 trace ids per hash; wider blocks hash a hash of their ids.
                for group in trace_ids.chunks_exact(k).take(full) {
                    if k <= 8 {
                        push(group, out);
                    } else {
                        let digest = group.iter().fold(SEED, |h, &id| {
                            xxh3_64_with_seed(&[h.to_le_bytes(), id.to_le_bytes()].concat(), SEED)
                        });
                        push(&[digest], out);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn request(tokens: u64, ids: &[u64]) -> Request {
        Request { prompt_tokens: tokens, prompt_ids: ids.to_vec(), ..Request::default() }
    }

    fn ids(blocks: EngineBlocks, r: &Request) -> Vec<u64> {
        let mut out = vec![];
        blocks.prompt_ids(r, &mut out);
        out
    }

    #[test]
    fn full_blocks_only_and_equal_prefixes_give_equal_ids() {
        let same = EngineBlocks::new(4, 4).unwrap();
        let a = ids(same, &request(10, &[1, 2, 3]));
        assert_eq!(a.len(), 2, "10 tokens: two full blocks of 4");
        let b = ids(same, &request(12, &[1, 2, 9]));
        assert_eq!(b[..2], a[..2]);
        let c = ids(same, &request(12, &[5, 2, 3]));
        assert_ne!(c[1], a[1], "same id, different parent");
    }

    #[test]
    fn a_smaller_engine_block_reuses_a_partial_trace_block() {
        let split = EngineBlocks::new(8, 2).unwrap();
        // 13 tokens: block 1 (ids[1]) has 5 tokens, so two full sub-blocks.
        let partial = ids(split, &request(13, &[1, 2]));
        assert_eq!(partial.len(), 6);
        let whole = ids(split, &request(16, &[1, 2]));
        assert_eq!(whole.len(), 8);
        assert_eq!(whole[..6], partial[..]);
        assert_ne!(ids(split, &request(16, &[1, 3]))[4], whole[4]);
    }

    #[test]
    fn a_larger_engine_block_covers_several_trace_ids() {
        for k in [2usize, 3, 9, 12] {
            let merge = EngineBlocks::new(2, 2 * k).unwrap();
            let trace: Vec<u64> = (1..=3 * k as u64).collect();
            let tokens = 2 * 3 * k as u64 - 1;
            let got = ids(merge, &request(tokens, &trace));
            assert_eq!(got.len(), 2, "the last engine block is partial");
            let mut other = trace.clone();
            other[k + 1] = 99;
            let changed = ids(merge, &request(tokens, &other));
            assert_eq!((changed[0], changed[1] == got[1]), (got[0], false));
        }
        assert_eq!(
            EngineBlocks::new(16, 24).unwrap_err(),
            FleetError::BlockSizes { trace: 16, engine: 24 }
        );
    }
}

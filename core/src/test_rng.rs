//! The unit tests' random stream: Marsaglia's xorshift64 (shifts 13, 7, 17) from a fixed
//! seed, so that every run draws the same values and a failure repeats.

/// Steps `state` (which must not be 0) and returns the new state.
pub(crate) fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

//! The numeric conversions that may lose range, each saying what it does
//! at the edges, in one place: the workspace's cast lints
//! (`cast_possible_truncation`, `cast_sign_loss`, `cast_possible_wrap`)
//! refuse silent ones everywhere else.
//!
//! Each keeps the exact result of Rust's `as` where the value fits (so the
//! simulator's outputs are unchanged), and says what it does where it
//! does not.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_possible_wrap)]

/// A real (bytes, microseconds, a count) as a whole number, truncated
/// toward zero; negative and NaN become 0, past `u64::MAX` it saturates.
pub fn to_u64(x: f64) -> u64 {
    x as u64
}

/// As [`to_u64`], into a `u32`.
pub fn to_u32(x: f64) -> u32 {
    x as u32
}

/// As [`to_u64`], into a `usize` (an index into a vector of that length).
pub fn to_usize(x: f64) -> usize {
    x as usize
}

/// A `u128` (a `Duration`'s micro- or nanoseconds, a product of byte
/// counts) as a `u64`, saturating.
pub fn u128_to_u64(x: u128) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

/// A count or an index as a `u32`, saturating (no node, slot or kill count
/// comes near).
pub fn usize_to_u32(x: usize) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

/// A count as an `i32` (drawing coordinates), saturating.
pub fn usize_to_i32(x: usize) -> i32 {
    i32::try_from(x).unwrap_or(i32::MAX)
}

/// A `u32` as an `i32` (drawing coordinates), saturating.
pub fn u32_to_i32(x: u32) -> i32 {
    i32::try_from(x).unwrap_or(i32::MAX)
}

/// A `u64` as a `u32`, saturating.
pub fn u64_to_u32(x: u64) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

/// A `u64` as a `usize`, saturating (on 32-bit targets).
pub fn u64_to_usize(x: u64) -> usize {
    usize::try_from(x).unwrap_or(usize::MAX)
}

/// A `u64` as an `i64` (SQLite's integers), saturating.
pub fn u64_to_i64(x: u64) -> i64 {
    i64::try_from(x).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_keeps_what_fits_and_says_what_it_does_at_the_edges() {
        assert_eq!(to_u64(12.9), 12);
        assert_eq!((to_u64(-1.0), to_u64(f64::NAN), to_u64(1e30)), (0, 0, u64::MAX));
        assert_eq!((to_u32(7.5), to_u32(1e12)), (7, u32::MAX));
        assert_eq!(to_usize(3.99), 3);
        assert_eq!((u128_to_u64(5), u128_to_u64(u128::MAX)), (5, u64::MAX));
        assert_eq!((usize_to_u32(9), usize_to_u32(usize::MAX)), (9, u32::MAX));
        assert_eq!((usize_to_i32(9), usize_to_i32(usize::MAX)), (9, i32::MAX));
        assert_eq!((u32_to_i32(9), u32_to_i32(u32::MAX)), (9, i32::MAX));
        assert_eq!((u64_to_i64(9), u64_to_i64(u64::MAX)), (9, i64::MAX));
        assert_eq!(u64_to_usize(9), 9);
    }
}

//! Software prefetch: the engine spends most of its time waiting for memory
//! (a day at Google scale keeps hundreds of thousands of tasks spread over a
//! gigabyte), so while one event runs, the node and task the next one
//! touches are asked for ahead. A prefetch is only a hint to the cache: it
//! changes no value, so the simulation is the same with or without it.
#![allow(unsafe_code)]

/// Ask the cache for the memory of `value` (every line of it).
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    prefetch_slice(std::slice::from_ref(value));
}

/// Ask the cache for cache lines `lines` of `value` (a part of it laid out
/// for one reader, as `Task` is), counted from its start.
#[inline(always)]
pub fn prefetch_lines<T>(value: &T, lines: std::ops::Range<usize>) {
    let size = std::mem::size_of::<T>();
    let start = (lines.start * 64).min(size);
    let end = (lines.end * 64).min(size);
    prefetch_range(std::ptr::from_ref(value) as usize + start, end.saturating_sub(start));
}

/// Ask the cache for the memory of `values` (every line of it).
#[inline(always)]
pub fn prefetch_slice<T>(values: &[T]) {
    prefetch_range(values.as_ptr() as usize, std::mem::size_of_val(values));
}

/// Ask the cache for a span of memory given as (address, bytes), such as
/// `NodePolicy::state_spans`: it may have moved since, as a prefetch of
/// memory no longer there is harmless.
#[inline(always)]
pub fn prefetch_span((start, bytes): (usize, usize)) {
    prefetch_range(start, bytes);
}

/// Ask the cache for `bytes` of memory from address `start`.
#[inline(always)]
fn prefetch_range(start: usize, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let end = start + bytes;
        let mut line = start & !63;
        while line < end {
            // SAFETY: a prefetch never faults and never changes memory,
            // whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line as *const i8) };
            line += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, bytes);
}

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

/// Ask the cache for the memory of `values` (every line of it).
#[inline(always)]
pub fn prefetch_slice<T>(values: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let start = values.as_ptr() as usize;
        let end = start + std::mem::size_of_val(values);
        let mut line = start & !63;
        while line < end {
            // SAFETY: a prefetch never faults and never changes memory,
            // whatever the address; this one is inside `values`, which are live.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line as *const i8) };
            line += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = values;
}

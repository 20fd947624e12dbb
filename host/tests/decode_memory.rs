//! Unpacking a compressed plugin costs memory in proportion to the plugin,
//! never to what a hostile file claims to hold: a decompression bomb is
//! refused with the host's allocations barely moving. Its own test binary,
//! as it counts every allocation of the process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

use wasmprov::delivery::encoding::{decode, DecodeError, Encoding, MAX_COMPONENT_SIZE};

/// The system allocator, keeping the live and the peak bytes.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A stream of `size` zero bytes, compressed without ever holding them.
fn bomb_into(encoding: Encoding, size: u64) -> Vec<u8> {
    fn zeros(w: &mut impl Write, size: u64) {
        let chunk = vec![0u8; 1 << 20];
        let mut left = size;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            w.write_all(&chunk[..n]).unwrap();
            left -= n as u64;
        }
    }
    match encoding {
        Encoding::Gzip => {
            let mut w = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            zeros(&mut w, size);
            w.finish().unwrap()
        }
        _ => {
            let mut w = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
            zeros(&mut w, size);
            w.finish().unwrap()
        }
    }
}

#[test]
fn a_decompression_bomb_is_refused_without_holding_what_it_would_unpack() {
    for encoding in [Encoding::Zstd, Encoding::Gzip] {
        let file = bomb_into(encoding, MAX_COMPONENT_SIZE + (1 << 20));
        assert!(file.len() < 2 << 20, "{encoding:?}: {} bytes", file.len());
        let before = LIVE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let result = decode(encoding, file);
        let grew = PEAK.load(Ordering::Relaxed) - before;
        assert!(
            matches!(result, Err(DecodeError::TooLarge)),
            "{encoding:?}: {result:?}"
        );
        assert!(
            grew < 32 << 20,
            "{encoding:?}: unpacking a bomb took {} MiB",
            grew >> 20
        );
    }
}

#[test]
fn a_plugin_within_the_limit_is_unpacked_into_exactly_its_size() {
    let wasm: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    for encoding in [Encoding::Zstd, Encoding::Gzip] {
        let file = wasmprov::delivery::encoding::encode(encoding, &wasm).unwrap();
        let out = decode(encoding, file).unwrap();
        assert_eq!(out, wasm, "{encoding:?}");
        assert_eq!(out.capacity(), wasm.len(), "{encoding:?}");
    }
}

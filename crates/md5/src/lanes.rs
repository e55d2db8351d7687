//! Sixteen MD5 chains advanced together by AVX-512, on x86-64.
//!
//! Lane `k` of each 512-bit register holds body `k`'s state; a step of MD5 is then a handful
//! of vector instructions for sixteen bodies (`vpternlogd` computes each round's Boolean
//! function in one, `vprold` the rotation). The sixteen bodies' blocks, wherever they are in
//! memory, are loaded a block per register and transposed in registers (unpacks of 32- and
//! 64-bit words, then two rounds of 128-bit shuffles: 64 instructions), so that register `i`
//! holds message word `i` of every lane: gathering each word from the sixteen blocks instead
//! costs more than the rounds themselves. Lanes with nothing to hash read a block of zeros
//! that does not advance, and their state is left untouched.
//!
//! The kernel is built only for x86-64. Elsewhere this module keeps its interface, but
//! [`available`] is false and nothing calls [`compress16`].
//!
//! The only unsafe code of the crate is here: the loads read memory through raw pointers, and
//! the kernel may only run where the CPU has AVX-512F (checked at run time by [`available`]).

#![allow(unsafe_code)]

/// One lane's input for [`compress16`]: whole blocks of one body, in order.
pub type Run<'a> = &'a [[u8; 64]];

/// Whether this CPU runs the 16-lane kernel.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Advances `states[k]` by the first `n` blocks of `runs[k]` for every lane that has a run;
/// `n` is the shortest run's length. Returns `n`.
///
/// # Panics
/// If the CPU lacks AVX-512F, or the target is not x86-64 (callers check [`available`]).
pub fn compress16(states: &mut [[u32; 4]; 16], runs: &[Option<Run<'_>>; 16]) -> usize {
    let n = runs.iter().flatten().map(|r| r.len()).min().unwrap_or(0);
    if n == 0 {
        return 0;
    }
    assert!(available(), "compress16 needs AVX-512F");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: AVX-512F is present (asserted above); every active lane's pointer is valid for
    // `n` blocks (its run holds at least `n`), idle lanes read `ZEROS` with a stride of 0.
    unsafe {
        x86::compress16(states, runs, n);
    }
    // Not reached: `available` is false off x86-64.
    #[cfg(not(target_arch = "x86_64"))]
    let _ = states;
    n
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{
        __m512i, _mm512_add_epi32, _mm512_loadu_si512, _mm512_mask_mov_epi32, _mm512_rol_epi32,
        _mm512_set1_epi32, _mm512_shuffle_i32x4, _mm512_storeu_si512, _mm512_ternarylogic_epi32,
        _mm512_unpackhi_epi32, _mm512_unpackhi_epi64, _mm512_unpacklo_epi32, _mm512_unpacklo_epi64,
    };

    use super::Run;

    /// A block of zeros for idle lanes to read.
    static ZEROS: [u8; 64] = [0; 64];

    /// # Safety
    /// The CPU has AVX-512F; every `Some` run holds at least `n` blocks.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn compress16(
        states: &mut [[u32; 4]; 16],
        runs: &[Option<Run<'_>>; 16],
        n: usize,
    ) {
        // Where each lane's blocks start and how far apart they are: idle lanes read ZEROS,
        // which does not advance.
        let mut starts = [ZEROS.as_ptr(); 16];
        let mut strides = [0usize; 16];
        let mut active: u16 = 0;
        for (k, run) in runs.iter().enumerate() {
            if let Some(run) = run {
                starts[k] = run.as_ptr().cast();
                strides[k] = 64;
                active |= 1 << k;
            }
        }
        let mut words = [[0u32; 16]; 4];
        for (k, s) in states.iter().enumerate() {
            for w in 0..4 {
                words[w][k] = s[w];
            }
        }
        let mut state = [_mm512_set1_epi32(0); 4];
        for (v, w) in state.iter_mut().zip(&words) {
            // SAFETY: 16 × 4 bytes.
            *v = unsafe { _mm512_loadu_si512(w.as_ptr().cast()) };
        }
        for step in 0..n {
            let mut m = [_mm512_set1_epi32(0); 16];
            for (k, row) in m.iter_mut().enumerate() {
                // SAFETY: an active lane's run holds more than `step` blocks of 64 bytes;
                // an idle lane reads the 64 bytes of ZEROS.
                *row = unsafe { _mm512_loadu_si512(starts[k].add(step * strides[k]).cast()) };
            }
            transpose(&mut m);
            let before = state;
            block(&mut state, &m);
            for (s, s0) in state.iter_mut().zip(before) {
                // Idle lanes keep their state.
                *s = _mm512_mask_mov_epi32(s0, active, _mm512_add_epi32(s0, *s));
            }
        }
        for (w, v) in words.iter_mut().zip(state) {
            // SAFETY: 16 × 4 bytes.
            unsafe { _mm512_storeu_si512(w.as_mut_ptr().cast(), v) };
        }
        for (k, s) in states.iter_mut().enumerate() {
            for w in 0..4 {
                s[w] = words[w][k];
            }
        }
    }

    /// Transposes sixteen rows of sixteen 32-bit words: row `k` (lane `k`'s block) in, row `i`
    /// (word `i` of every lane, lane `k` in element `k`) out.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn transpose(r: &mut [__m512i; 16]) {
        // Within 128-bit lanes: pairs of rows interleaved by words, then by pairs of words.
        let mut t = [_mm512_set1_epi32(0); 16];
        for j in (0..16).step_by(2) {
            t[j] = _mm512_unpacklo_epi32(r[j], r[j + 1]);
            t[j + 1] = _mm512_unpackhi_epi32(r[j], r[j + 1]);
        }
        for j in (0..16).step_by(4) {
            r[j] = _mm512_unpacklo_epi64(t[j], t[j + 2]);
            r[j + 1] = _mm512_unpackhi_epi64(t[j], t[j + 2]);
            r[j + 2] = _mm512_unpacklo_epi64(t[j + 1], t[j + 3]);
            r[j + 3] = _mm512_unpackhi_epi64(t[j + 1], t[j + 3]);
        }
        // Then the 128-bit lanes themselves: 0x88 takes lanes 0 and 2 of each source, 0xDD
        // lanes 1 and 3.
        for g in [0, 8] {
            for j in 0..4 {
                t[g + j] = _mm512_shuffle_i32x4::<0x88>(r[g + j], r[g + 4 + j]);
                t[g + 4 + j] = _mm512_shuffle_i32x4::<0xDD>(r[g + j], r[g + 4 + j]);
            }
        }
        for j in 0..8 {
            r[j] = _mm512_shuffle_i32x4::<0x88>(t[j], t[8 + j]);
            r[8 + j] = _mm512_shuffle_i32x4::<0xDD>(t[j], t[8 + j]);
        }
    }

    /// The 64 steps of one block (RFC 1321 §3.4), sixteen lanes at once.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn block(state: &mut [__m512i; 4], m: &[__m512i; 16]) {
        let [mut a, mut b, mut c, mut d] = *state;
        // a = b + ((a + f(b, c, d) + m + k) <<< s), f given as a `vpternlogd` truth table:
        // 0xCA = b ? c : d (F), 0xE4 = d ? b : c (G), 0x96 = b ^ c ^ d (H), 0x39 = c ^ (b | !d) (I).
        macro_rules! step {
            ($f:literal, $a:ident, $b:ident, $c:ident, $d:ident, $m:expr, $k:literal, $s:literal) => {
                $a = _mm512_add_epi32(
                    $b,
                    _mm512_rol_epi32::<$s>(_mm512_add_epi32(
                        _mm512_add_epi32($a, _mm512_ternarylogic_epi32::<$f>($b, $c, $d)),
                        _mm512_add_epi32($m, _mm512_set1_epi32(u32::cast_signed($k))),
                    )),
                );
            };
        }
        step!(0xCA, a, b, c, d, m[0], 0xd76a_a478, 7);
        step!(0xCA, d, a, b, c, m[1], 0xe8c7_b756, 12);
        step!(0xCA, c, d, a, b, m[2], 0x2420_70db, 17);
        step!(0xCA, b, c, d, a, m[3], 0xc1bd_ceee, 22);
        step!(0xCA, a, b, c, d, m[4], 0xf57c_0faf, 7);
        step!(0xCA, d, a, b, c, m[5], 0x4787_c62a, 12);
        step!(0xCA, c, d, a, b, m[6], 0xa830_4613, 17);
        step!(0xCA, b, c, d, a, m[7], 0xfd46_9501, 22);
        step!(0xCA, a, b, c, d, m[8], 0x6980_98d8, 7);
        step!(0xCA, d, a, b, c, m[9], 0x8b44_f7af, 12);
        step!(0xCA, c, d, a, b, m[10], 0xffff_5bb1, 17);
        step!(0xCA, b, c, d, a, m[11], 0x895c_d7be, 22);
        step!(0xCA, a, b, c, d, m[12], 0x6b90_1122, 7);
        step!(0xCA, d, a, b, c, m[13], 0xfd98_7193, 12);
        step!(0xCA, c, d, a, b, m[14], 0xa679_438e, 17);
        step!(0xCA, b, c, d, a, m[15], 0x49b4_0821, 22);
        step!(0xE4, a, b, c, d, m[1], 0xf61e_2562, 5);
        step!(0xE4, d, a, b, c, m[6], 0xc040_b340, 9);
        step!(0xE4, c, d, a, b, m[11], 0x265e_5a51, 14);
        step!(0xE4, b, c, d, a, m[0], 0xe9b6_c7aa, 20);
        step!(0xE4, a, b, c, d, m[5], 0xd62f_105d, 5);
        step!(0xE4, d, a, b, c, m[10], 0x0244_1453, 9);
        step!(0xE4, c, d, a, b, m[15], 0xd8a1_e681, 14);
        step!(0xE4, b, c, d, a, m[4], 0xe7d3_fbc8, 20);
        step!(0xE4, a, b, c, d, m[9], 0x21e1_cde6, 5);
        step!(0xE4, d, a, b, c, m[14], 0xc337_07d6, 9);
        step!(0xE4, c, d, a, b, m[3], 0xf4d5_0d87, 14);
        step!(0xE4, b, c, d, a, m[8], 0x455a_14ed, 20);
        step!(0xE4, a, b, c, d, m[13], 0xa9e3_e905, 5);
        step!(0xE4, d, a, b, c, m[2], 0xfcef_a3f8, 9);
        step!(0xE4, c, d, a, b, m[7], 0x676f_02d9, 14);
        step!(0xE4, b, c, d, a, m[12], 0x8d2a_4c8a, 20);
        step!(0x96, a, b, c, d, m[5], 0xfffa_3942, 4);
        step!(0x96, d, a, b, c, m[8], 0x8771_f681, 11);
        step!(0x96, c, d, a, b, m[11], 0x6d9d_6122, 16);
        step!(0x96, b, c, d, a, m[14], 0xfde5_380c, 23);
        step!(0x96, a, b, c, d, m[1], 0xa4be_ea44, 4);
        step!(0x96, d, a, b, c, m[4], 0x4bde_cfa9, 11);
        step!(0x96, c, d, a, b, m[7], 0xf6bb_4b60, 16);
        step!(0x96, b, c, d, a, m[10], 0xbebf_bc70, 23);
        step!(0x96, a, b, c, d, m[13], 0x289b_7ec6, 4);
        step!(0x96, d, a, b, c, m[0], 0xeaa1_27fa, 11);
        step!(0x96, c, d, a, b, m[3], 0xd4ef_3085, 16);
        step!(0x96, b, c, d, a, m[6], 0x0488_1d05, 23);
        step!(0x96, a, b, c, d, m[9], 0xd9d4_d039, 4);
        step!(0x96, d, a, b, c, m[12], 0xe6db_99e5, 11);
        step!(0x96, c, d, a, b, m[15], 0x1fa2_7cf8, 16);
        step!(0x96, b, c, d, a, m[2], 0xc4ac_5665, 23);
        step!(0x39, a, b, c, d, m[0], 0xf429_2244, 6);
        step!(0x39, d, a, b, c, m[7], 0x432a_ff97, 10);
        step!(0x39, c, d, a, b, m[14], 0xab94_23a7, 15);
        step!(0x39, b, c, d, a, m[5], 0xfc93_a039, 21);
        step!(0x39, a, b, c, d, m[12], 0x655b_59c3, 6);
        step!(0x39, d, a, b, c, m[3], 0x8f0c_cc92, 10);
        step!(0x39, c, d, a, b, m[10], 0xffef_f47d, 15);
        step!(0x39, b, c, d, a, m[1], 0x8584_5dd1, 21);
        step!(0x39, a, b, c, d, m[8], 0x6fa8_7e4f, 6);
        step!(0x39, d, a, b, c, m[15], 0xfe2c_e6e0, 10);
        step!(0x39, c, d, a, b, m[6], 0xa301_4314, 15);
        step!(0x39, b, c, d, a, m[13], 0x4e08_11a1, 21);
        step!(0x39, a, b, c, d, m[4], 0xf753_7e82, 6);
        step!(0x39, d, a, b, c, m[11], 0xbd3a_f235, 10);
        step!(0x39, c, d, a, b, m[2], 0x2ad7_d2bb, 15);
        step!(0x39, b, c, d, a, m[9], 0xeb86_d391, 21);
        *state = [a, b, c, d];
    }
}

//! The segmented AEAD end to end: round trips at every boundary size, ranged reads across
//! segment boundaries, the length arithmetic both ways, and each kind of tampering refused
//! with its own error.

use sluice_crypt::{
    Decryptor, Encryptor, Error, HEADER_LEN, Identity, Layout, TAG_LEN, TenantKey, decrypt,
    decrypt_range, encrypt, seal_segments,
};

const SEG: u32 = 64;

fn key(byte: u8) -> TenantKey {
    TenantKey::from_bytes(&[byte; 32]).expect("32 bytes")
}

fn id(key: &str) -> Identity<'_> {
    Identity {
        tenant: "alice",
        bucket: "ckpt",
        key,
        generation: 7,
        part: 0,
    }
}

/// A pattern whose every byte depends on its offset, so a shifted or swapped range differs.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + i / 251) as u8).collect()
}

fn sizes() -> Vec<usize> {
    let s = SEG as usize;
    vec![
        0,
        1,
        s - 1,
        s,
        s + 1,
        2 * s - 1,
        2 * s,
        2 * s + 1,
        17 * s + 5,
        40 * s,
    ]
}

#[test]
fn round_trips_at_every_boundary_size() {
    let k = key(1);
    for len in sizes() {
        let plain = pattern(len);
        let ct = encrypt(&k, &id("o"), SEG, &plain).expect("encrypt");
        let layout = Layout::new(SEG, len as u64).expect("layout");
        assert_eq!(ct.len() as u64, layout.ciphertext_len(), "len {len}");
        assert_eq!(
            Layout::from_ciphertext_len(SEG, ct.len() as u64).expect("valid length"),
            layout,
            "len {len}"
        );
        assert_eq!(
            decrypt(&k, &id("o"), &ct).expect("decrypt"),
            plain,
            "len {len}"
        );
        if len >= 16 {
            assert!(
                !ct.windows(16).any(|w| w == &plain[..16]),
                "plaintext visible in the ciphertext at len {len}"
            );
        }
    }
}

#[test]
fn streaming_in_uneven_pieces_equals_the_layout() {
    let k = key(1);
    let plain = pattern(10 * SEG as usize + 3);
    let (mut enc, header) = Encryptor::new(&k, &id("o"), SEG).expect("encryptor");
    let mut ct = header.to_vec();
    for piece in plain.chunks(37) {
        enc.update(piece, &mut ct);
    }
    assert_eq!(enc.finish(&mut ct), plain.len() as u64);
    assert_eq!(decrypt(&k, &id("o"), &ct).expect("decrypt"), plain);
}

/// Segments sealed out of place, each from two pieces split at every offset (as a segment
/// lies across two of a caller's buffers), make the same format: the body decrypts, and
/// every segment and tag lands where the layout says.
#[test]
fn sealing_out_of_place_from_two_pieces_equals_the_layout() {
    let k = key(1);
    let s = SEG as usize;
    for len in sizes() {
        let plain = pattern(len);
        let (mut enc, header) = Encryptor::new(&k, &id("o"), SEG).expect("encryptor");
        let mut ct = header.to_vec();
        let segments: Vec<&[u8]> = if len == 0 {
            vec![&[]]
        } else {
            plain.chunks(s).collect()
        };
        for (i, seg) in segments.iter().enumerate() {
            let (head, tail) = seg.split_at((i * 7) % (seg.len() + 1));
            let mut out = vec![0u8; seg.len() + TAG_LEN];
            enc.seal_next(head, tail, i + 1 == segments.len(), &mut out)
                .expect("fits");
            ct.extend_from_slice(&out);
        }
        assert_eq!(enc.plaintext_len(), len as u64);
        let layout = Layout::new(SEG, len as u64).expect("layout");
        assert_eq!(ct.len() as u64, layout.ciphertext_len(), "len {len}");
        assert_eq!(
            decrypt(&k, &id("o"), &ct).expect("decrypt"),
            plain,
            "len {len}"
        );
    }
}

/// A segment short of the segment size that is not the last, one over it, or an output of
/// the wrong length is refused and nothing is written.
#[test]
fn a_misfit_segment_is_refused_out_of_place() {
    let k = key(1);
    let (mut enc, _) = Encryptor::new(&k, &id("o"), SEG).expect("encryptor");
    let s = SEG as usize;
    let plain = pattern(s + 1);
    for (head, tail, last, out) in [
        (&plain[..s - 1], &plain[..0], false, s - 1 + TAG_LEN),
        (&plain[..s], &plain[s..], true, s + 1 + TAG_LEN),
        (&plain[..s], &plain[..0], false, s),
    ] {
        let mut buf = vec![9u8; out];
        assert!(
            matches!(
                enc.seal_next(head, tail, last, &mut buf),
                Err(Error::Misfit { index: 0, .. })
            ),
            "{} + {} bytes into {out}",
            head.len(),
            tail.len()
        );
        assert!(buf.iter().all(|&b| b == 9), "a refused seal wrote");
    }
    assert_eq!(enc.plaintext_len(), 0);
}

#[test]
fn ciphertext_lengths_no_plaintext_encrypts_to_are_refused() {
    let s = u64::from(SEG);
    let h = HEADER_LEN as u64;
    let t = TAG_LEN as u64;
    for bad in [0, h, h + t - 1, h + s + t + t, h + s + t + 5] {
        assert!(
            matches!(
                Layout::from_ciphertext_len(SEG, bad),
                Err(Error::Length { .. })
            ),
            "length {bad}"
        );
    }
}

#[test]
fn ranged_reads_across_segment_boundaries_decrypt_only_their_segments() {
    let k = key(1);
    let len = 9 * SEG as usize + 10;
    let plain = pattern(len);
    let ct = encrypt(&k, &id("o"), SEG, &plain).expect("encrypt");
    let layout = Layout::new(SEG, len as u64).expect("layout");
    let s = u64::from(SEG);
    let ranges = [
        0..1,
        0..s,
        s - 1..s + 1,
        s..2 * s,
        3 * s - 5..6 * s + 5,
        9 * s..len as u64,
        len as u64 - 1..len as u64,
        0..len as u64,
    ];
    for range in ranges {
        let span = layout.span(range.clone()).expect("span");
        assert_eq!(span.first, range.start / s);
        assert_eq!(span.last, (range.end - 1) / s);
        let segments = &ct[span.ciphertext.start as usize..span.ciphertext.end as usize];
        let got = decrypt_range(
            &k,
            &id("o"),
            &ct[..HEADER_LEN],
            ct.len() as u64,
            range.clone(),
            segments,
        )
        .expect("ranged decrypt");
        assert_eq!(
            got,
            &plain[range.start as usize..range.end as usize],
            "{range:?}"
        );
    }
    assert!(matches!(
        layout.span(0..len as u64 + 1),
        Err(Error::Range { .. })
    ));
    assert!(matches!(layout.span(5..5), Err(Error::Range { .. })));
}

fn sample() -> (TenantKey, Vec<u8>, Vec<u8>) {
    let k = key(1);
    let plain = pattern(4 * SEG as usize + 9);
    let ct = encrypt(&k, &id("o"), SEG, &plain).expect("encrypt");
    (k, plain, ct)
}

#[test]
fn a_flipped_byte_anywhere_is_refused() {
    let (k, _, ct) = sample();
    for at in [0, 4, 8, 12, 25, 40, 79, 80, 80 + 63, 80 + 64, ct.len() - 1] {
        let mut bad = ct.clone();
        bad[at] ^= 0x01;
        let err = decrypt(&k, &id("o"), &bad).expect_err("tampered");
        assert!(
            matches!(
                err,
                Error::NotEncrypted
                    | Error::Version(_)
                    | Error::SegmentSize(_)
                    | Error::WrongKey { .. }
                    | Error::Header
                    | Error::Segment { .. }
                    | Error::Length { .. }
            ),
            "byte {at}: {err}"
        );
        if at >= HEADER_LEN {
            assert_eq!(
                err,
                Error::Segment {
                    index: ((at - HEADER_LEN) / (SEG as usize + TAG_LEN)) as u64
                },
                "byte {at}"
            );
        }
    }
}

#[test]
fn truncation_is_refused_including_a_whole_last_segment() {
    let (k, _, ct) = sample();
    let stride = SEG as usize + TAG_LEN;
    // Dropping the last segment exactly leaves a valid length whose new last segment was
    // sealed as not last.
    let dropped = &ct[..HEADER_LEN + 4 * stride];
    assert_eq!(
        decrypt(&k, &id("o"), dropped),
        Err(Error::Segment { index: 3 })
    );
    // Cuts elsewhere: an impossible length, or a last segment whose tag does not match.
    for cut in [1, 5, TAG_LEN, stride, stride + 3] {
        let err = decrypt(&k, &id("o"), &ct[..ct.len() - cut]).expect_err("truncated");
        assert!(
            matches!(err, Error::Segment { .. } | Error::Length { .. }),
            "cut {cut}: {err}"
        );
    }
    assert_eq!(
        decrypt(&k, &id("o"), &ct[..HEADER_LEN]),
        Err(Error::Length {
            len: HEADER_LEN as u64,
            segment_size: SEG
        })
    );
    assert_eq!(decrypt(&k, &id("o"), &ct[..10]), Err(Error::NotEncrypted));
}

#[test]
fn swapped_segments_are_refused() {
    let (k, _, ct) = sample();
    let stride = SEG as usize + TAG_LEN;
    let mut bad = ct.clone();
    let (a, b) = (HEADER_LEN + stride, HEADER_LEN + 2 * stride);
    let first = ct[a..a + stride].to_vec();
    bad.copy_within(b..b + stride, a);
    bad[b..b + stride].copy_from_slice(&first);
    assert_eq!(
        decrypt(&k, &id("o"), &bad),
        Err(Error::Segment { index: 1 })
    );
}

#[test]
fn ciphertext_moved_to_another_object_is_refused() {
    let (k, _, ct) = sample();
    let moved = [
        Identity {
            key: "other",
            ..id("o")
        },
        Identity {
            generation: 8,
            ..id("o")
        },
        Identity {
            bucket: "ckpt2",
            ..id("o")
        },
        Identity {
            tenant: "bob",
            ..id("o")
        },
        Identity { part: 1, ..id("o") },
    ];
    for other in moved {
        assert_eq!(decrypt(&k, &other, &ct), Err(Error::Header), "{other:?}");
    }
    // A segment spliced from another object of the same tenant (its own data key) fails.
    let plain2 = pattern(4 * SEG as usize + 9);
    let ct2 = encrypt(&k, &id("o"), SEG, &plain2).expect("encrypt");
    let mut spliced = ct.clone();
    let at = HEADER_LEN + 2 * (SEG as usize + TAG_LEN);
    spliced[at..at + SEG as usize + TAG_LEN].copy_from_slice(&ct2[at..at + SEG as usize + TAG_LEN]);
    assert_eq!(
        decrypt(&k, &id("o"), &spliced),
        Err(Error::Segment { index: 2 })
    );
}

#[test]
fn another_tenant_key_is_named_as_such() {
    let (_, _, ct) = sample();
    let err = decrypt(&key(2), &id("o"), &ct).expect_err("wrong key");
    assert_eq!(
        err,
        Error::WrongKey {
            found: key(1).id(),
            expected: key(2).id()
        }
    );
    assert!(err.to_string().contains("another tenant key"));
}

#[test]
fn a_ranged_read_refuses_segments_that_are_not_the_ones_asked_for() {
    let (k, _, ct) = sample();
    let layout = Layout::new(SEG, 4 * u64::from(SEG) + 9).expect("layout");
    let span = layout.span(0..10).expect("span");
    let wrong = layout
        .span(u64::from(SEG)..u64::from(SEG) + 10)
        .expect("span");
    let segments = &ct[wrong.ciphertext.start as usize..wrong.ciphertext.end as usize];
    assert_eq!(span.first, 0);
    assert_eq!(
        decrypt_range(
            &k,
            &id("o"),
            &ct[..HEADER_LEN],
            ct.len() as u64,
            0..10,
            segments
        ),
        Err(Error::Segment { index: 0 })
    );
}

#[test]
fn a_decryptor_appends_nothing_when_a_later_segment_fails() {
    let (k, _, ct) = sample();
    let mut bad = ct.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0x80;
    let mut dec = Decryptor::open(&k, &id("o"), &bad, bad.len() as u64).expect("header opens");
    let mut out = b"kept".to_vec();
    assert_eq!(
        dec.decrypt_segments(0, &bad[HEADER_LEN..], &mut out),
        Err(Error::Segment { index: 4 })
    );
    assert_eq!(out, b"kept");
}

#[test]
fn bad_keys_and_segment_sizes_are_refused() {
    assert_eq!(
        TenantKey::from_bytes(&[0; 31]).map(|_| ()),
        Err(Error::KeyLength(31))
    );
    assert!(matches!(
        encrypt(&key(1), &id("o"), 8, b"x"),
        Err(Error::SegmentSize(8))
    ));
    assert_eq!(
        format!("{:?}", key(1)),
        format!("TenantKey({})", key(1).id())
    );
}

#[test]
fn the_benchmark_helper_counts_what_it_seals_and_refuses_a_bad_segment_size() {
    assert_eq!(seal_segments(3, 65_536), Ok(3 * 65_536));
    assert_eq!(seal_segments(0, 65_536), Ok(0));
    assert_eq!(seal_segments(1, 8), Err(Error::SegmentSize(8)));
}

#[test]
fn a_manifest_mac_verifies_only_under_its_own_key_and_for_its_own_bytes() {
    let key = TenantKey::from_bytes(&[7; 32]).expect("key");
    let other = TenantKey::from_bytes(&[8; 32]).expect("key");
    let tag = key.manifest_mac(b"counter 3");
    assert!(key.verify_manifest_mac(b"counter 3", &tag));
    assert!(!key.verify_manifest_mac(b"counter 2", &tag));
    assert!(!other.verify_manifest_mac(b"counter 3", &tag));
    assert!(!key.verify_manifest_mac(b"counter 3", &tag[..31]));
    assert_ne!(tag, other.manifest_mac(b"counter 3"));
}

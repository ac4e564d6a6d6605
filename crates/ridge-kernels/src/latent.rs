//! The two products of multi-head latent attention (`deepseek2`): every query head against a
//! chunk of cached latent rows, and the softmax-weighted sum of the rows' latent part per head.
//! All heads share the rows (one K/V "head" of `kv_lora + rope` values), so each row is read
//! once for every head.
//!
//! A scalar reference with explicit eight-lane accumulators and an AVX2 version that performs
//! the same operations in the same order on eight lanes (multiplies and adds kept apart, the
//! lanes reduced as `((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))`), so both give the same bits; a
//! result depends only on its inputs, never on how many heads or rows a call holds beside it.

use crate::Isa;

/// `sc[h · m + j] = scale · q_h · rows_j` for the query heads of `q` (`row` values each, back
/// to back) and the `m` rows of `rows` (`row` values each).
pub fn scores(isa: Isa, q: &[f32], rows: &[f32], row: usize, scale: f32, sc: &mut [f32]) {
    if isa.avx2() {
        // SAFETY: `avx2()` holds only where the CPU has AVX2 and FMA.
        unsafe { scores_avx2(q, rows, row, scale, sc) }
    } else {
        scores_body(q, rows, row, scale, sc)
    }
}

/// `out[h · (rank + 2) ..][..rank] = Σ_j w[h · m + j] · rows_j[..rank]` for every head `h` of
/// `w` (`m` weights each): the weighted sum of each row's first `rank` values, into the
/// leading `rank` values of each head's `rank + 2`-value record of `out`.
pub fn weighted_rows(isa: Isa, w: &[f32], rows: &[f32], row: usize, rank: usize, out: &mut [f32]) {
    if isa.avx2() {
        // SAFETY: as in `scores`.
        unsafe { weighted_rows_avx2(w, rows, row, rank, out) }
    } else {
        weighted_rows_body(w, rows, row, rank, out)
    }
}

/// The eight lanes of a dot product's accumulator reduced as the AVX2 version reduces them.
#[inline(always)]
fn reduce8(a: &[f32; 8]) -> f32 {
    let s = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    (s[0] + s[2]) + (s[1] + s[3])
}

/// [`scores_body`] on AVX2: four heads' eight-lane chains per row element loaded.
#[target_feature(enable = "avx2,fma")]
unsafe fn scores_avx2(q: &[f32], rows: &[f32], row: usize, scale: f32, sc: &mut [f32]) {
    use std::arch::x86_64::*;
    let h = q.len() / row;
    let m = rows.len() / row;
    assert!(q.len() == h * row && rows.len() == m * row && sc.len() >= h * m);
    let whole = row - row % 8;
    let mut hh = 0;
    while hh < h {
        let g = (h - hh).min(4);
        let qp: [*const f32; 4] = std::array::from_fn(|x| q[(hh + x.min(g - 1)) * row..].as_ptr());
        for (j, r) in rows.chunks_exact(row).enumerate() {
            let rp = r.as_ptr();
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut k = 0;
            while k < whole {
                // SAFETY: k + 8 <= whole <= row, inside this row and each head's `row` values
                // (the asserts above bound the slices).
                let rv = _mm256_loadu_ps(rp.add(k));
                for (a, p) in acc.iter_mut().zip(&qp) {
                    *a = _mm256_add_ps(*a, _mm256_mul_ps(_mm256_loadu_ps(p.add(k)), rv));
                }
                k += 8;
            }
            for (x, a) in acc.iter().enumerate().take(g) {
                let mut lanes = [0f32; 8];
                _mm256_storeu_ps(lanes.as_mut_ptr(), *a);
                let qx = &q[(hh + x) * row..(hh + x + 1) * row];
                let tail: f32 = (whole..row).map(|d| qx[d] * r[d]).sum();
                sc[(hh + x) * m + j] = scale * (reduce8(&lanes) + tail);
            }
        }
        hh += g;
    }
}

/// [`weighted_rows_body`] on AVX2: sixty-four values of a head's sum in eight registers across
/// the chunk's rows.
#[target_feature(enable = "avx2,fma")]
unsafe fn weighted_rows_avx2(w: &[f32], rows: &[f32], row: usize, rank: usize, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let m = rows.len() / row;
    assert!(rank <= row && rows.len() == m * row);
    for (wh, part) in w.chunks_exact(m).zip(out.chunks_exact_mut(rank + 2)) {
        for (b, a) in part[..rank].chunks_mut(64).enumerate() {
            let len = a.len();
            let vecs = len / 8;
            let mut reg = [_mm256_setzero_ps(); 8];
            let mut tail = [0f32; 8];
            for (&wj, r) in wh.iter().zip(rows.chunks_exact(row)) {
                let wv = _mm256_set1_ps(wj);
                let rp = r[b * 64..b * 64 + len].as_ptr();
                for (i, x) in reg.iter_mut().enumerate().take(vecs) {
                    // SAFETY: 8·i + 8 <= len, inside this row's block of `len` values.
                    *x = _mm256_add_ps(*x, _mm256_mul_ps(wv, _mm256_loadu_ps(rp.add(8 * i))));
                }
                for (t, &v) in tail.iter_mut().zip(&r[b * 64 + 8 * vecs..b * 64 + len]) {
                    *t += wj * v;
                }
            }
            for (i, x) in reg.iter().enumerate().take(vecs) {
                _mm256_storeu_ps(a[8 * i..].as_mut_ptr(), *x);
            }
            a[8 * vecs..].copy_from_slice(&tail[..len - 8 * vecs]);
        }
    }
}

/// Four heads at a time against each row: four independent eight-lane chains per row element
/// loaded.
#[inline(always)]
fn scores_body(q: &[f32], rows: &[f32], row: usize, scale: f32, sc: &mut [f32]) {
    let h = q.len() / row;
    let m = rows.len() / row;
    let whole = row - row % 8;
    let mut hh = 0;
    while hh < h {
        let g = (h - hh).min(4);
        let qs: [&[f32]; 4] = std::array::from_fn(|x| {
            let x = hh + x.min(g - 1);
            &q[x * row..(x + 1) * row]
        });
        for (j, r) in rows.chunks_exact(row).enumerate() {
            let mut acc = [[0f32; 8]; 4];
            for k in (0..whole).step_by(8) {
                let rk: &[f32; 8] = r[k..k + 8].try_into().expect("eight values");
                for (a, qx) in acc.iter_mut().zip(&qs) {
                    let qk: &[f32; 8] = qx[k..k + 8].try_into().expect("eight values");
                    for l in 0..8 {
                        a[l] += qk[l] * rk[l];
                    }
                }
            }
            for (x, a) in acc.iter().enumerate().take(g) {
                let tail: f32 = (whole..row).map(|d| qs[x][d] * r[d]).sum();
                sc[(hh + x) * m + j] = scale * (reduce8(a) + tail);
            }
        }
        hh += g;
    }
}

/// Sixty-four values of the sum at a time, held across the chunk's rows.
#[inline(always)]
fn weighted_rows_body(w: &[f32], rows: &[f32], row: usize, rank: usize, out: &mut [f32]) {
    let m = rows.len() / row;
    for (wh, part) in w.chunks_exact(m).zip(out.chunks_exact_mut(rank + 2)) {
        for (b, a) in part[..rank].chunks_mut(64).enumerate() {
            let mut reg = [0f32; 64];
            let len = a.len();
            for (&wj, r) in wh.iter().zip(rows.chunks_exact(row)) {
                let r = &r[b * 64..b * 64 + len];
                for (x, &v) in reg.iter_mut().zip(r) {
                    *x += wj * v;
                }
            }
            a.copy_from_slice(&reg[..len]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }

    /// Both paths against a float64 reference, and each other's bits; a head's scores do not
    /// depend on the heads beside it.
    #[test]
    fn products_match_float64_on_every_path() {
        // A row with a tail past its eight-lane groups, a rank with a partial block of 64.
        let (h, m, row, rank) = (7, 13, 84, 76);
        let (q, rows, w) = (values(h * row, 1), values(m * row, 2), values(h * m, 3));
        let mut got = Vec::new();
        for isa in [Isa::SCALAR, Isa::detect()] {
            let mut sc = vec![0f32; h * m];
            scores(isa, &q, &rows, row, 0.5, &mut sc);
            for hh in 0..h {
                for j in 0..m {
                    let want: f64 = (0..row)
                        .map(|d| q[hh * row + d] as f64 * rows[j * row + d] as f64)
                        .sum::<f64>()
                        * 0.5;
                    assert!((sc[hh * m + j] as f64 - want).abs() < 1e-4);
                }
            }
            let mut one = vec![0f32; m];
            scores(isa, &q[2 * row..3 * row], &rows, row, 0.5, &mut one);
            assert_eq!(one, sc[2 * m..3 * m]);
            let mut out = vec![0f32; h * (rank + 2)];
            weighted_rows(isa, &w, &rows, row, rank, &mut out);
            for hh in 0..h {
                for r in 0..rank {
                    let want: f64 = (0..m)
                        .map(|j| w[hh * m + j] as f64 * rows[j * row + r] as f64)
                        .sum();
                    assert!((out[hh * (rank + 2) + r] as f64 - want).abs() < 1e-4);
                }
            }
            got.push((sc, out));
        }
        assert_eq!(got[0], got[1], "scalar and SIMD give different bits");
    }
}
